// The memory the stand-in's allocator model gets, through the calls PyTorch makes for it
// (c10/cuda/CUDACachingAllocator.cpp v2.6.0): cudaMalloc and cudaFree for segments, or a MemPool's
// own allocator's raw_alloc and raw_delete (allocPrimitive); for expandable segments the driver's
// cuMemAddressReserve, cuMemCreate + cuMemMap + cuMemSetAccess a page at a time, cuMemUnmap +
// cuMemRelease after synchronizing (unmapHandles), cuMemAddressFree. The driver's functions
// come by dlsym on libcuda.so.1 opened RTLD_NOLOAD (c10/cuda/driver_api.cpp, 2.3, 2.6), or
// cudaGetDriverEntryPointByVersion in 2.9-era main.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdlib>

#include "caching_allocator.h"

namespace c10::cuda::CUDACachingAllocator::Native {

namespace {

template <typename Fn>
Fn driver(const char* name) {
  void* fn = nullptr;
#if SIM_TORCH_MINOR >= 9
  cudaDriverEntryPointQueryResult found{};
  cudaGetDriverEntryPointByVersion(name, &fn, 12030, cudaEnableDefault, &found);
#else
  static void* libcuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);  // create_driver_api
  if (libcuda) fn = dlsym(libcuda, name);
#endif
  return reinterpret_cast<Fn>(fn);
}

class CudaMemory : public memtrace::torch_model::DeviceMemory {
 public:
  CudaMemory(DeviceIndex device, const std::map<MempoolId_t, CUDAAllocator*>& pools) : device_(device), pools_(pools) {}

  uint64_t allocate(size_t bytes, memtrace::torch_model::PoolId pool) override {
    if (CUDAAllocator* own = own_allocator(pool)) return reinterpret_cast<uint64_t>(own->raw_alloc(bytes));
    void* ptr = nullptr;
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return reinterpret_cast<uint64_t>(ptr);
  }
  void free(uint64_t addr, size_t, memtrace::torch_model::PoolId pool) override {
    if (CUDAAllocator* own = own_allocator(pool))
      own->raw_delete(reinterpret_cast<void*>(addr));
    else
      cudaFree(reinterpret_cast<void*>(addr));
  }

  uint64_t reserve_range(size_t bytes) override {
    auto reserve = driver<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
    CUdeviceptr va = 0;
    if (!reserve || reserve(&va, bytes, 0, 0, 0) != CUDA_SUCCESS) return 0;
    return va;
  }
  // A page at a time (ExpandableSegment::map); out of memory, this call's pages are released.
  bool map(uint64_t addr, size_t bytes, size_t page) override {
    auto create = driver<decltype(&cuMemCreate)>("cuMemCreate");
    auto map_fn = driver<decltype(&cuMemMap)>("cuMemMap");
    auto set_access = driver<decltype(&cuMemSetAccess)>("cuMemSetAccess");
    auto release = driver<decltype(&cuMemRelease)>("cuMemRelease");
    if (!create || !map_fn || !set_access || !release) return false;
    std::vector<CUmemGenericAllocationHandle> made;
    for (uint64_t at = addr; at < addr + bytes; at += page) {
      CUmemAllocationProp prop{};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      prop.location.id = device_;
      CUmemGenericAllocationHandle handle = 0;
      if (create(&handle, page, &prop, 0) != CUDA_SUCCESS) {
        for (CUmemGenericAllocationHandle h : made) release(h);
        return false;
      }
      made.push_back(handle);
    }
    for (size_t i = 0; i < made.size(); ++i) {
      map_fn(addr + i * page, page, 0, made[i], 0);
      handles_[addr + i * page] = made[i];
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device_;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    set_access(addr, bytes, &access, 1);
    return true;
  }
  void unmap(uint64_t addr, size_t bytes, size_t page) override {
    auto unmap_fn = driver<decltype(&cuMemUnmap)>("cuMemUnmap");
    auto release = driver<decltype(&cuMemRelease)>("cuMemRelease");
    cudaDeviceSynchronize();  // unmapHandles synchronizes the stream first
    for (uint64_t at = addr; at < addr + bytes; at += page) {
      if (unmap_fn) unmap_fn(at, page);
      auto it = handles_.find(at);
      if (it == handles_.end()) continue;
      if (release) release(it->second);
      handles_.erase(it);
    }
  }
  void free_range(uint64_t addr, size_t bytes) override {
    if (auto address_free = driver<decltype(&cuMemAddressFree)>("cuMemAddressFree")) address_free(addr, bytes);
  }

  size_t free_bytes() override { return info().first; }
  size_t total_bytes() override { return info().second; }

 private:
  CUDAAllocator* own_allocator(memtrace::torch_model::PoolId pool) const {
    auto it = pools_.find(MempoolId_t{pool.first, pool.second});
    return it == pools_.end() ? nullptr : it->second;
  }
  static std::pair<size_t, size_t> info() {
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    return {free_bytes, total};
  }

  const DeviceIndex device_;
  const std::map<MempoolId_t, CUDAAllocator*>& pools_;
  std::map<uint64_t, CUmemGenericAllocationHandle> handles_;  // each mapped page's
};

}  // namespace

std::unique_ptr<memtrace::torch_model::DeviceMemory> cuda_memory(DeviceIndex device,
                                                                 const std::map<MempoolId_t, CUDAAllocator*>& pools) {
  return std::make_unique<CudaMemory>(device, pools);
}

}  // namespace c10::cuda::CUDACachingAllocator::Native
