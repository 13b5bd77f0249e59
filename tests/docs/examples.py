#!/usr/bin/env python3
"""Runs every command example of README.md and docs/*.md, and the example each `memtrace COMMAND
--help` ends with, and fails on any that does not succeed.

    examples.py BUILD_DIR SOURCE_DIR [PAGE...]

An example is a line of a ```sh block (a line ending in a backslash goes on to the next; a `#`
comment after a command is not part of it). Each page's examples run in order, in a fresh folder
holding what they name: `train.py` (the stand-in PyTorch's training sample, run on the simulated
device through `python`), `./train_loop` and `./oom` (samples), and runs recorded beforehand:
`run/` (train.py), `base/` and `new/` (train_loop, the second leaking 2 MiB a step), `oom-run/` (a
program that ran out of memory), `job/node1`, `job/node2` (two nodes' folders), `snapshot.pickle`
(a real PyTorch snapshot) and `config.json` (a model's Hugging Face config); `import memtrace`
finds the package. An example that
should fail says with which status: `# exits 1`. Blocks marked ```text (launchers this machine
lacks, installation, output) are not run; `--help` examples naming a process id (attach, detach)
are left to the attach tests, which run them on a live process.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

build, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
pages = sys.argv[3:] or ["README.md"] + sorted(
    os.path.join("docs", f) for f in os.listdir(os.path.join(source, "docs")) if f.endswith(".md"))
memtrace = os.path.join(build, "bin", "memtrace")


def examples_of(text):
    """(line number, command, expected status) of every line of every ```sh block."""
    found, in_sh, pending, first = [], False, "", 0
    for number, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            in_sh = line.strip() == "```sh"
            continue
        if not in_sh or not line.strip():
            continue
        if not pending:
            first = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        command = pending + line
        pending = ""
        status = 0
        match = re.search(r"\s#\s*exits (\d+)", command)
        if match:
            status = int(match.group(1))
        command = re.sub(r"(^|\s)#.*$", "", command).strip()
        if command:
            found.append((first, command, status))
    return found


def environment(bin_dir):
    env = dict(os.environ)
    env["PATH"] = bin_dir + ":" + os.path.join(build, "bin") + ":" + env["PATH"]
    # train.py on the stand-in PyTorch, over the simulated device, as `memtrace run --sim` would.
    # The memtrace package as the wheel installs it (without the shim's sitecustomize beside it).
    env["PYTHONPATH"] = os.path.join(build, "lib", "sim", "torch", "site-packages") + ":" + os.path.join(
        os.path.dirname(bin_dir), "site")
    env["LD_LIBRARY_PATH"] = os.path.join(build, "lib", "sim")
    env["MEMTRACE_SIM_CAPACITY"] = "16GiB"
    return env


def sh(command, cwd, env, status=0):
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)
    return done.returncode == status, done


def make_fixtures(folder):
    bin_dir = os.path.join(folder, "bin")
    os.makedirs(bin_dir)
    python = sys.executable or "/usr/bin/python3"
    first = os.environ.get("MEMTRACE_PRELOAD_FIRST")
    if first:  # scripts/sanitize: a Python that loads the instrumented injector itself needs its runtime first
        with open(os.path.join(bin_dir, "python"), "w") as f:
            f.write(f'#!/bin/sh\nLD_PRELOAD="{first}${{LD_PRELOAD:+:$LD_PRELOAD}}" exec "{python}" "$@"\n')
        os.chmod(os.path.join(bin_dir, "python"), 0o755)
    else:
        os.symlink(python, os.path.join(bin_dir, "python"))
    os.makedirs(os.path.join(folder, "site"))
    os.symlink(os.path.join(build, "lib", "python", "memtrace"), os.path.join(folder, "site", "memtrace"))
    env = environment(bin_dir)
    shutil.copy(os.path.join(source, "samples", "python", "torch_train.py"), os.path.join(folder, "train.py"))
    for sample in ("train_loop", "oom"):
        os.symlink(os.path.join(build, "samples", sample), os.path.join(folder, sample))
    shutil.copy(os.path.join(source, "tests", "data", "torch", "2.3-attention-backward.pickle"),
                os.path.join(folder, "snapshot.pickle"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write('{"model_type": "gpt2", "n_layer": 4, "n_head": 4, "n_embd": 256, "vocab_size": 1000, '
                '"n_positions": 512}\n')
    for command, status in [
        ("memtrace run --sim -o run -- python train.py --steps 4", 0),
        ("memtrace run --sim -o base -- ./train_loop --steps 5", 0),
        ("memtrace run --sim -o new -- ./train_loop --steps 5 --leak-kib 2048", 0),
        ("memtrace run --sim --sim-capacity 4GiB -o oom-run -- ./oom --chunk-mib 1024", 1),
        ("mkdir -p job/node1 job/node2 && cp run/*.memtrace job/node1/ && cp base/*.memtrace job/node2/", 0),
    ]:
        ok, done = sh(command, folder, env, status)
        if not ok:
            sys.exit(f"examples: making the fixtures, `{command}` exited {done.returncode}:\n{done.stdout}")
    return bin_dir


def help_examples():
    """The example each command's --help ends with, as a page of its own."""
    listing = subprocess.run([memtrace, "--help"], stdout=subprocess.PIPE, text=True).stdout.split("Examples:")[0]
    names = re.findall(r"^  (\w+)\s", listing, flags=re.M)
    lines = []
    for name in names:
        text = subprocess.run([memtrace, name, "--help"], stdout=subprocess.PIPE, text=True).stdout
        match = re.search(r"Example:\n  (.*)", text)
        if not match:
            sys.exit(f"examples: `memtrace {name} --help` ends with no example")
        if name not in ("attach", "detach"):  # a live process's id: the attach tests run these
            lines.append(match.group(1))
    return "```sh\n" + "\n".join(lines) + "\n```\n"


failures, count = [], 0
with tempfile.TemporaryDirectory(prefix="memtrace-docs.") as scratch:
    fixtures = os.path.join(scratch, "fixtures")
    os.makedirs(fixtures)
    bin_dir = make_fixtures(fixtures)
    env = environment(bin_dir)
    texts = [(page, open(os.path.join(source, page)).read()) for page in pages]
    texts.append(("memtrace COMMAND --help", help_examples()))
    for page, text in texts:
        examples = examples_of(text)
        if not examples:
            continue
        folder = os.path.join(scratch, re.sub(r"\W", "_", page))
        shutil.copytree(fixtures, folder, symlinks=True)
        for line, command, status in examples:
            count += 1
            ok, done = sh(command, folder, env, status)
            if not ok:
                failures.append(f"{page}:{line}: `{command}` exited {done.returncode}, not {status}:\n"
                                + "\n".join(done.stdout.splitlines()[-15:]))
for failure in failures:
    print(failure, file=sys.stderr)
print(f"examples: {count} run, {len(failures)} failed")
sys.exit(1 if failures or count == 0 else 0)
