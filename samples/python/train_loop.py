"""A training-like loop in Python: parameters and optimizer state live for the whole run,
activations for one step. Runs on a GPU, or on memtrace's simulated device."""

import sys

import cuda

MiB = 1 << 20


def build_model(layers):
    params = [cuda.malloc(4 * MiB) for _ in range(layers)]  # memtrace-test: build_model
    optimizer = [cuda.malloc(8 * MiB) for _ in range(layers)]
    return params, optimizer


def forward(layers):
    activations = []
    for _ in range(layers):
        activations.append(cuda.malloc(2 * MiB))  # memtrace-test: forward
    return activations


def train_step(layers):
    activations = forward(layers)  # memtrace-test: train_step
    for buffer in reversed(activations):
        cuda.free(buffer)


def main(steps=5, layers=4):
    params, optimizer = build_model(layers)  # memtrace-test: main
    for _ in range(steps):
        train_step(layers)  # memtrace-test: main-step
    for buffer in params + optimizer:
        cuda.free(buffer)
    cuda.print_account()


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))  # memtrace-test: module
