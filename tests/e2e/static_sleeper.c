/* A statically linked program that waits to be killed: no dynamic loader in it for memtrace
   attach to load into (it says so). Prints "sleeping" once it waits. */
#include <stdio.h>
#include <unistd.h>

int main(void) {
  printf("sleeping\n");
  fflush(stdout);
  for (;;) pause();
}
