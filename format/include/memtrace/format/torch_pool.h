// PyTorch's private pools, as a trace names them: the pool a segment of PyTorch's caching
// allocator was made for (torch.segment_alloc's and torch.segment_map's handle), from PyTorch's
// MempoolId_t, a pair (c10/cuda/CUDACachingAllocator.cpp v2.6.0, MemPool; CUDAGraph.cpp):
//   {0, 0}      the default pool;
//   {uuid, 0}   a CUDA graph capture's own pool (capture_begin without a pool);
//   {0, uid}    a pool of the user's: torch.cuda.MemPool, or graph_pool_handle() shared by captures.
#pragma once

#include <cstdint>
#include <string>

namespace memtrace {

// One number for the pair; 0 for the default pool.
inline uint64_t torch_pool_key(uint64_t first, uint64_t second) {
  if (first) return first << 1;
  return second ? (second << 1) | 1 : 0;
}

// The pair again, from its key.
struct TorchPoolId {
  uint64_t first = 0, second = 0;
};
inline TorchPoolId torch_pool_id(uint64_t key) {
  if (!key) return {};
  return key & 1 ? TorchPoolId{0, key >> 1} : TorchPoolId{key >> 1, 0};
}

// The pool's name ("CUDA graph pool 1", "MemPool 2"), and what such a pool is.
inline std::string torch_pool_name(uint64_t key) {
  if (!key) return "the default pool";
  return (key & 1 ? "MemPool " : "CUDA graph pool ") + std::to_string(key >> 1);
}
inline const char* torch_pool_kind(uint64_t key) {
  if (!key) return "the default pool";
  return key & 1 ? "a torch.cuda.MemPool, or a graph_pool_handle() captures share" : "a CUDA graph capture's own pool";
}

}  // namespace memtrace
