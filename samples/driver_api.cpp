// The driver API directly: a context of its own, device, pitched, managed and pinned host
// memory, and a free of a pointer that was never allocated (a failed call the report counts).
#include <cuda.h>

#include "sample_account.h"

namespace {
sample::Account account;

void check(const char* api, CUresult r, int64_t device_bytes = 0) {
  account.call(api, r == CUDA_SUCCESS);
  SAMPLE_CHECK(r);
  account.live(0, device_bytes);
}
}  // namespace

int main() {
  SAMPLE_CHECK(cuInit(0));
  CUdevice device;
  SAMPLE_CHECK(cuDeviceGet(&device, 0));
  CUcontext ctx;
  SAMPLE_CHECK(cuCtxCreate(&ctx, nullptr, 0, device));

  CUdeviceptr plain = 0, pitched = 0, managed = 0;
  size_t pitch = 0;
  check("cuMemAlloc", cuMemAlloc(&plain, 48 << 20), 48 << 20);
  CUresult r = cuMemAllocPitch(&pitched, &pitch, 1000, 300, 4);
  check("cuMemAllocPitch", r, static_cast<int64_t>(pitch * 300));
  check("cuMemAllocManaged", cuMemAllocManaged(&managed, 16 << 20, CU_MEM_ATTACH_GLOBAL), 16 << 20);

  void* host = nullptr;
  void* host2 = nullptr;
  check("cuMemAllocHost", cuMemAllocHost(&host, 4 << 20));
  check("cuMemHostAlloc", cuMemHostAlloc(&host2, 2 << 20, CU_MEMHOSTALLOC_PORTABLE));

  size_t free_bytes = 0, total = 0;
  SAMPLE_CHECK(cuMemGetInfo(&free_bytes, &total));

  r = cuMemFree(0xdead0000);  // never allocated: fails, and is counted as failed
  account.call("cuMemFree", r == CUDA_SUCCESS);

  check("cuMemFreeHost", cuMemFreeHost(host2));
  check("cuMemFreeHost", cuMemFreeHost(host));
  check("cuMemFree", cuMemFree(managed), -(16 << 20));
  check("cuMemFree", cuMemFree(pitched), -static_cast<int64_t>(pitch * 300));
  check("cuMemFree", cuMemFree(plain), -(48 << 20));
  SAMPLE_CHECK(cuCtxDestroy(ctx));
  account.print();
  return 0;
}
