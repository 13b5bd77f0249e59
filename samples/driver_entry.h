// A driver function as PyTorch gets its driver functions: from the runtime's
// cudaGetDriverEntryPointByVersion (by default at CUDA 12.0's ABI), not by symbol. Stops the
// sample when the runtime has none.
#pragma once

#include <cuda_runtime_api.h>

#include "sample_account.h"

namespace sample {

template <typename Fn>
Fn driver_entry(const char* name, unsigned int version = 12000) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status;
  SAMPLE_CHECK(cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &status));
  SAMPLE_CHECK(status != cudaDriverEntryPointSuccess);
  return reinterpret_cast<Fn>(fn);
}

}  // namespace sample
