// A training loop that marks its steps with NVTX and sub-allocates through a small caching
// allocator that describes itself with NVTX's memory API, as PyTorch's would:
//   - load_weights keeps 16 MiB for the whole run (allocated once, kept: not a leak);
//   - each step runs inside the range "train_step", then marks "memtrace.step"; forward takes
//     three 4 MiB activations from the pool and gives them back;
//   - record_loss keeps --leak-bytes (default 1 MiB) every step and never frees it: the
//     `total_loss += loss` leak, growing by a fixed amount per step;
//   - with --fragment, after the steps, fill the pool with 2 MiB blocks, free every other one,
//     then ask for 4 MiB: half the pool is free but no hole fits, so the pool asks the device
//     for a new segment (which fails on a device that is full: an OOM of fragmentation).
//   steps [--steps N] [--leak-bytes B] [--fragment]
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtMem.h>

#include <map>
#include <vector>

#include "sample_account.h"

namespace {

sample::Account account;
constexpr size_t kMiB = 1 << 20;
constexpr size_t kSegmentBytes = 32 * kMiB;

// Called with cudaMalloc's result, so that the allocating function is the site's frame.
void* counted(cudaError_t e, void* const* p, size_t bytes) {
  account.call("cudaMalloc", e == cudaSuccess);
  if (e != cudaSuccess) return nullptr;
  account.live(0, static_cast<int64_t>(bytes));
  return *p;
}

// First-fit sub-allocation out of cudaMalloc'd segments, each one an NVTX heap.
class Pool {
 public:
  void* alloc(size_t bytes) {
    for (;;) {
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->second < bytes) continue;
        char* p = it->first;
        size_t left = it->second - bytes;
        free_.erase(it);
        if (left) free_[p + bytes] = left;
        used_[p] = bytes;
        describe_region(p, bytes);
        return p;
      }
      if (!grow()) return nullptr;
    }
  }

  void release(void* ptr) {
    char* p = static_cast<char*>(ptr);
    size_t size = used_.at(p);
    used_.erase(p);
    nvtxMemRegionRef_t ref;
    ref.pointer = p;
    nvtxMemRegionsUnregisterBatch_t batch = {};
    batch.extCompatID = NVTX_EXT_COMPATID_MEM;
    batch.structSize = sizeof batch;
    batch.refType = NVTX_MEM_REGION_REF_TYPE_POINTER;
    batch.refCount = 1;
    batch.refElementSize = sizeof ref;
    batch.refElements = &ref;
    nvtxMemRegionsUnregister(nullptr, &batch);
    // Merge with the free neighbours inside the same segment.
    auto next = free_.find(p + size);
    if (next != free_.end() && !starts_segment(next->first)) {
      size += next->second;
      free_.erase(next);
    }
    auto it = free_.emplace(p, size).first;
    if (it != free_.begin() && !starts_segment(p)) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == p) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }

 private:
  bool grow() {
    void* p = nullptr;
    char* segment = static_cast<char*>(counted(cudaMalloc(&p, kSegmentBytes), &p, kSegmentBytes));
    if (!segment) return false;
    segments_.push_back(segment);
    free_[segment] = kSegmentBytes;
    nvtxMemVirtualRangeDesc_t range = {kSegmentBytes, segment};
    nvtxMemHeapDesc_t heap = {};
    heap.extCompatID = NVTX_EXT_COMPATID_MEM;
    heap.structSize = sizeof heap;
    heap.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
    heap.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    heap.typeSpecificDescSize = sizeof range;
    heap.typeSpecificDesc = &range;
    heaps_[segment] = nvtxMemHeapRegister(nullptr, &heap);
    return true;
  }

  void describe_region(char* p, size_t bytes) {
    char* segment = std::prev(heaps_.upper_bound(p))->first;
    nvtxMemVirtualRangeDesc_t region = {bytes, p};
    nvtxMemRegionsRegisterBatch_t batch = {};
    batch.extCompatID = NVTX_EXT_COMPATID_MEM;
    batch.structSize = sizeof batch;
    batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    batch.heap = heaps_[segment];
    batch.regionCount = 1;
    batch.regionDescElementSize = sizeof region;
    batch.regionDescElements = &region;
    nvtxMemRegionsRegister(nullptr, &batch);
  }

  bool starts_segment(char* p) const { return heaps_.count(p) != 0; }

  std::vector<char*> segments_;
  std::map<char*, nvtxMemHeapHandle_t> heaps_;
  std::map<char*, size_t> free_, used_;
};

Pool pool;
std::vector<void*> weights, losses;

__attribute__((noinline)) void load_weights() {
  void* p = nullptr;
  weights.push_back(counted(cudaMalloc(&p, 16 * kMiB), &p, 16 * kMiB));
}

__attribute__((noinline)) void record_loss(size_t bytes) {
  void* p = nullptr;
  losses.push_back(counted(cudaMalloc(&p, bytes), &p, bytes));
}

__attribute__((noinline)) void forward(std::vector<void*>& activations) {
  for (int i = 0; i < 3; ++i) activations.push_back(pool.alloc(4 * kMiB));
}

void train_step(size_t leak_bytes) {
  nvtxRangePushA("train_step");
  std::vector<void*> activations;
  forward(activations);
  record_loss(leak_bytes);
  for (void* a : activations) pool.release(a);
  nvtxRangePop();
  nvtxMarkA("memtrace.step");
}

__attribute__((noinline)) void fragment() {
  std::vector<void*> blocks;
  for (size_t i = 0; i < kSegmentBytes / (2 * kMiB); ++i) blocks.push_back(pool.alloc(2 * kMiB));
  for (size_t i = 0; i < blocks.size(); i += 2) pool.release(blocks[i]);
  void* big = pool.alloc(4 * kMiB);  // no hole fits: the pool needs a new segment
  std::printf("fragment: 4 MiB from the pool %s\n", big ? "in a new segment" : "failed (out of memory)");
}

}  // namespace

int main(int argc, char** argv) {
  const long steps = sample::arg_value(argc, argv, "--steps", 10);
  const long leak_bytes = sample::arg_value(argc, argv, "--leak-bytes", static_cast<long>(kMiB));
  bool frag = false;
  for (int i = 1; i < argc; ++i) frag |= std::string(argv[i]) == "--fragment";
  load_weights();
  for (long s = 0; s < steps; ++s) train_step(static_cast<size_t>(leak_bytes));
  if (frag) fragment();
  account.print();
  return 0;
}
