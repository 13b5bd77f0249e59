// Per-thread memory too large for static TLS. memtrace.record (injector/record.cpp) loads the
// injector into a running program with dlopen, where glibc has only a small surplus of static TLS
// (about 1.6 KB) for a library whose TLS is initial-exec; the injector's own thread_local variables
// therefore stay a few words, and its per-thread tables live in blocks mapped on a thread's first
// use (mmap: no malloc inside a CUDA call) and unmapped when it exits.
#pragma once

#include <cstddef>

namespace memtrace::inject {

enum class ThreadBlock { kPythonCodeCache, kPythonFrames, kCuptiPending, kFrameRules, kKeptStack, kCount };

// This thread's block WHICH of BYTES bytes (the same size at every call), zero-filled when first
// mapped; null when it cannot be mapped.
void* thread_block(ThreadBlock which, size_t bytes);

}  // namespace memtrace::inject
