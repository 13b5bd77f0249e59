/* What memtrace attach must leave exactly as it was (tests/e2e/attach_test.cpp):
   - with --spin, the main thread spins in the program's own code with values in all sixteen vector
     registers, checked against what it put there each round: memtrace stops this thread for its
     calls (the first it tries), and must give them back unchanged; with --read, the main thread
     waits in read() on a pipe, and memtrace must look further;
   - a thread waits in epoll_wait, which a ptrace stop would end early with EINTR: memtrace must
     never stop it;
   - a thread waits for the file STOP (in usleep: where memtrace may stop it), then tells the main
     thread to end.
   It loads libcuda.so.1 (memtrace attach joins only processes that use CUDA) and makes no call.
   Prints "victim: ready" once all three run, "victim: intact" at the end (exit 0), or what changed
   (exit 1).
     attach_victim STOP --spin|--read */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_int stop_now;
static atomic_int epoll_failed;
static int wake[2]; /* the pipe --read waits on */

static void* wait_in_epoll(void* arg) {
  (void)arg;
  int epoll = epoll_create1(0);
  struct epoll_event event;
  int n = epoll_wait(epoll, &event, 1, -1); /* nothing is ever added: it returns only if interrupted */
  if (!atomic_load(&stop_now)) {
    fprintf(stderr, "victim: epoll_wait returned %d (%s)\n", n, n < 0 ? strerror(errno) : "an event");
    atomic_store(&epoll_failed, 1);
  }
  return NULL;
}

static void* wait_for_file(void* path) {
  struct stat st;
  while (stat((const char*)path, &st) != 0) usleep(2000);
  atomic_store(&stop_now, 1);
  if (write(wake[1], "x", 1) != 1) perror("victim: write");
  return NULL;
}

/* Loads PATTERN into xmm0..xmm15, spins in this program's own code, and stores them back into OUT. */
static void spin_with_vectors(const unsigned char* pattern, unsigned char* out) {
  __asm__ volatile(
      "movdqu 0(%0), %%xmm0\n movdqu 16(%0), %%xmm1\n movdqu 32(%0), %%xmm2\n movdqu 48(%0), %%xmm3\n"
      "movdqu 64(%0), %%xmm4\n movdqu 80(%0), %%xmm5\n movdqu 96(%0), %%xmm6\n movdqu 112(%0), %%xmm7\n"
      "movdqu 128(%0), %%xmm8\n movdqu 144(%0), %%xmm9\n movdqu 160(%0), %%xmm10\n movdqu 176(%0), %%xmm11\n"
      "movdqu 192(%0), %%xmm12\n movdqu 208(%0), %%xmm13\n movdqu 224(%0), %%xmm14\n movdqu 240(%0), %%xmm15\n"
      "mov $2000000, %%ecx\n"
      "1: dec %%ecx\n jnz 1b\n"
      "movdqu %%xmm0, 0(%1)\n movdqu %%xmm1, 16(%1)\n movdqu %%xmm2, 32(%1)\n movdqu %%xmm3, 48(%1)\n"
      "movdqu %%xmm4, 64(%1)\n movdqu %%xmm5, 80(%1)\n movdqu %%xmm6, 96(%1)\n movdqu %%xmm7, 112(%1)\n"
      "movdqu %%xmm8, 128(%1)\n movdqu %%xmm9, 144(%1)\n movdqu %%xmm10, 160(%1)\n movdqu %%xmm11, 176(%1)\n"
      "movdqu %%xmm12, 192(%1)\n movdqu %%xmm13, 208(%1)\n movdqu %%xmm14, 224(%1)\n movdqu %%xmm15, 240(%1)\n"
      :
      : "r"(pattern), "r"(out)
      : "ecx", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
}

int main(int argc, char** argv) {
  if (argc != 3 || (strcmp(argv[2], "--spin") != 0 && strcmp(argv[2], "--read") != 0)) {
    fprintf(stderr, "usage: attach_victim STOP --spin|--read\n");
    return 2;
  }
  if (pipe(wake) != 0) return 2;
  if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
    fprintf(stderr, "victim: %s\n", dlerror());
    return 2;
  }
  pthread_t epoll_thread, file_thread;
  pthread_create(&epoll_thread, NULL, wait_in_epoll, NULL);
  pthread_create(&file_thread, NULL, wait_for_file, argv[1]);
  unsigned char pattern[256], out[256];
  int rounds = 0, changed = 0;
  printf("victim: ready\n");
  fflush(stdout);
  if (strcmp(argv[2], "--read") == 0) {
    char byte;
    ssize_t n = read(wake[0], &byte, 1);
    if (n != 1) {
      fprintf(stderr, "victim: read returned %zd (%s)\n", n, n < 0 ? strerror(errno) : "end of file");
      changed = 1;
    }
  }
  while (!atomic_load(&stop_now)) {
    for (int i = 0; i < 256; ++i) pattern[i] = (unsigned char)(i * 13 + rounds);
    spin_with_vectors(pattern, out);
    if (memcmp(pattern, out, sizeof out) != 0 && !changed++) fprintf(stderr, "victim: vector registers changed\n");
    ++rounds;
  }
  pthread_join(file_thread, NULL);
  pthread_cancel(epoll_thread);
  pthread_join(epoll_thread, NULL);
  if (changed || atomic_load(&epoll_failed)) return 1;
  printf("victim: intact\n");
  return 0;
}
