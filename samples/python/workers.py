"""Worker processes, as DataLoader workers and torchrun make them: two forked, two spawned. Each
allocates on its own and prints its own account; the parent allocates once they are done (CUDA
must not be initialized in a parent before it forks)."""

import multiprocessing

import cuda

MiB = 1 << 20


def work(index):
    buffers = [cuda.malloc((index + 1) * MiB) for _ in range(3)]  # memtrace-test: worker
    cuda.free(buffers.pop())
    cuda.print_account()


def run(method, first):
    context = multiprocessing.get_context(method)
    workers = [context.Process(target=work, args=(first + i,)) for i in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
        if w.exitcode != 0:
            raise SystemExit(f"{method} worker failed with {w.exitcode}")


if __name__ == "__main__":
    run("fork", 0)
    run("spawn", 2)
    kept = cuda.malloc(8 * MiB)
    cuda.free(kept)
    cuda.print_account()
