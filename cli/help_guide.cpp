// The help's guide: `memtrace --help` lists the commands by what they are for (record, analyse,
// compare and gate, export, jobs), and every command's --help ends with one example. The examples
// run in the tests (tests/docs/examples.py), on a recorded run named out/.
#include <string>

#include "command.h"

namespace memtrace::cli {

namespace {

struct Guide {
  const char* command;
  const char* group;
  const char* example;
};

constexpr Guide kGuides[] = {
    {"run", "Record", "memtrace run --snapshot-at-peak -o out -- python train.py"},
    {"attach", "Record", "memtrace attach 4242 --for 10m -o attached"},
    {"detach", "Record", "memtrace detach 4242"},
    {"report", "Analyse", "memtrace report out/"},
    {"peak", "Analyse", "memtrace peak --layer allocated --by category out/"},
    {"leaks", "Analyse", "memtrace leaks --top 5 out/"},
    {"frag", "Analyse", "memtrace frag out/"},
    {"whatif", "Analyse", "memtrace whatif --alloc-conf expandable_segments:True out/"},
    {"timeline", "Analyse", "memtrace timeline --svg memory.svg out/"},
    {"snapshot", "Analyse", "memtrace snapshot out/"},
    {"estimate", "Analyse", "memtrace estimate --model llama-3-8b --mode train --gpus 8 --zero 3 --gpu H100"},
    {"explain", "Analyse", "memtrace explain out/ --model gpt2 --mode train"},
    {"diff", "Compare and gate", "memtrace diff base/ out/"},
    {"check", "Compare and gate", "memtrace check --max-peak 40GiB --max-leaked 64MiB --junit memory.xml out/"},
    {"verify", "Compare and gate", "memtrace run --verify -o checked -- python train.py && memtrace verify checked/"},
    {"html", "Export", "memtrace html -o report.html out/"},
    {"export", "Export", "memtrace export --format perfetto -o out.pftrace out/"},
    {"summarize", "Jobs", "memtrace summarize out/"},
};

}  // namespace

void add_help_guide(CLI::App& app, const std::vector<Command>& commands) {
  for (const Command& c : commands) {
    for (const Guide& g : kGuides) {
      if (c.app->get_name() != g.command) continue;
      c.app->group(g.group);
      std::string footer = c.app->get_footer();
      c.app->footer(footer + (footer.empty() ? "" : "\n\n") + "Example:\n  " + g.example);
    }
  }
  app.footer(
      "Examples:\n"
      "  memtrace run -o out -- python train.py    record a program, unchanged\n"
      "  memtrace report out/                      the peak per device, who held it, what was live at exit\n"
      "  memtrace leaks out/                       what was live at the end, what grew step by step\n"
      "  memtrace check --max-peak 40GiB out/      a CI gate\n"
      "memtrace COMMAND --help: a command's options and an example. The docs: docs/ beside the README.");
}

}  // namespace memtrace::cli
