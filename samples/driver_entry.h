// A driver function as PyTorch gets its driver functions: from the runtime's
// cudaGetDriverEntryPointByVersion (CUDA 12 ABI), not by symbol. Stops the sample when the
// runtime has none.
#pragma once

#include <cuda_runtime_api.h>

#include "sample_account.h"

namespace sample {

template <typename Fn>
Fn driver_entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status;
  SAMPLE_CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status));
  SAMPLE_CHECK(status != cudaDriverEntryPointSuccess);
  return reinterpret_cast<Fn>(fn);
}

}  // namespace sample
