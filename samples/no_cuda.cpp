// A program that never touches CUDA: memtrace must leave it, and its output, alone.
#include <cstdio>

int main(int argc, char** argv) {
  std::printf("no CUDA here: %d arguments\n", argc - 1);
  for (int i = 1; i < argc; ++i) std::printf("%s\n", argv[i]);
  return argc > 1 && argv[1][0] == 'x' ? 3 : 0;
}
