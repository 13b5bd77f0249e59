// Every kind of memory the runtime hands out: device, pitched, 3D, managed, pinned host (two
// ways); and a failed free.
#include <cuda_runtime.h>

#include "sample_account.h"

int main() {
  sample::Account account;
  auto note = [&](const char* api, cudaError_t e, int64_t device_bytes = 0) {
    account.call(api, e == cudaSuccess);
    SAMPLE_CHECK(e);
    account.live(0, device_bytes);
  };
  void *plain, *pitched, *managed, *pinned, *portable;
  size_t pitch = 0;
  note("cudaMalloc", cudaMalloc(&plain, 10 << 20), 10 << 20);
  cudaError_t e = cudaMallocPitch(&pitched, &pitch, 1000, 500);
  note("cudaMallocPitch", e, static_cast<int64_t>(pitch * 500));
  cudaPitchedPtr volume;
  e = cudaMalloc3D(&volume, make_cudaExtent(700, 64, 32));
  note("cudaMalloc3D", e, static_cast<int64_t>(volume.pitch * 64 * 32));
  note("cudaMallocManaged", cudaMallocManaged(&managed, 24 << 20, cudaMemAttachGlobal), 24 << 20);
  note("cudaMallocHost", cudaMallocHost(&pinned, 8 << 20));
  note("cudaHostAlloc", cudaHostAlloc(&portable, 4 << 20, cudaHostAllocPortable));

  int not_device_memory = 0;
  e = cudaFree(&not_device_memory);  // fails: a host stack address
  account.call("cudaFree", e == cudaSuccess);
  cudaGetLastError();

  note("cudaFreeHost", cudaFreeHost(portable));
  note("cudaFreeHost", cudaFreeHost(pinned));
  note("cudaFree", cudaFree(managed), -(24 << 20));
  note("cudaFree", cudaFree(volume.ptr), -static_cast<int64_t>(volume.pitch * 64 * 32));
  note("cudaFree", cudaFree(pitched), -static_cast<int64_t>(pitch * 500));
  note("cudaFree", cudaFree(plain), -(10 << 20));
  account.print();
  return 0;
}
