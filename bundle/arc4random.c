/* For the relocatable bundle only: the C++ runtime linked into memtrace (std::random_device) calls
   arc4random, which glibc has only since 2.36; this definition takes its place, so that the bundle
   runs with glibc 2.34 and 2.35 too (Ubuntu 22.04, RHEL 9). */
#include <stdint.h>
#include <sys/random.h>

uint32_t arc4random(void) {
  uint32_t value = 0;
  while (getrandom(&value, sizeof value, 0) != (ssize_t)sizeof value) {
  }
  return value;
}
