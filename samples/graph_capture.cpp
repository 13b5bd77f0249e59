// CUDA graphs: stream-ordered allocations made while a stream is being captured only add nodes
// to the graph (the memory is the graph's, obtained at each launch, never the program's). Each kind of call is made
// once outside capture and once inside: on a stream of its own (runtime and driver), and on the
// per-thread default stream. The sizes say which is which: 1 MiB and 5 MiB outside capture,
// 2, 3 and 4 MiB inside.
//   graph_capture
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "sample_account.h"

extern "C" {
cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream);
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* graph);
}

namespace {

sample::Account account;
constexpr size_t kMiB = 1 << 20;
// While capturing, an allocation is a node of the graph: no memory of the program's.
bool capturing = false;

void runtime_pair(size_t bytes, cudaStream_t stream, bool per_thread) {
  void* p = nullptr;
  cudaError_t e = per_thread ? cudaMallocAsync_ptsz(&p, bytes, stream) : cudaMallocAsync(&p, bytes, stream);
  account.call("cudaMallocAsync", e == cudaSuccess);
  SAMPLE_CHECK(e);
  if (!capturing) account.live(0, static_cast<int64_t>(bytes));
  e = per_thread ? cudaFreeAsync_ptsz(p, stream) : cudaFreeAsync(p, stream);
  account.call("cudaFreeAsync", e == cudaSuccess);
  SAMPLE_CHECK(e);
  if (!capturing) account.live(0, -static_cast<int64_t>(bytes));
}

void driver_pair(size_t bytes, cudaStream_t stream) {
  CUdeviceptr p = 0;
  CUresult r = cuMemAllocAsync(&p, bytes, reinterpret_cast<CUstream>(stream));
  account.call("cuMemAllocAsync", r == CUDA_SUCCESS);
  SAMPLE_CHECK(r);
  if (!capturing) account.live(0, static_cast<int64_t>(bytes));
  r = cuMemFreeAsync(p, reinterpret_cast<CUstream>(stream));
  account.call("cuMemFreeAsync", r == CUDA_SUCCESS);
  SAMPLE_CHECK(r);
  if (!capturing) account.live(0, -static_cast<int64_t>(bytes));
}

}  // namespace

int main() {
  cudaStream_t stream;
  SAMPLE_CHECK(cudaStreamCreate(&stream));
  runtime_pair(1 * kMiB, stream, false);  // not captured

  cudaGraph_t graph;
  SAMPLE_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  capturing = true;
  runtime_pair(2 * kMiB, stream, false);
  driver_pair(3 * kMiB, stream);
  capturing = false;
  SAMPLE_CHECK(cudaStreamEndCapture(stream, &graph));
  SAMPLE_CHECK(cudaGraphDestroy(graph));

  SAMPLE_CHECK(cudaStreamBeginCapture_ptsz(nullptr, cudaStreamCaptureModeThreadLocal));
  capturing = true;
  runtime_pair(4 * kMiB, nullptr, true);
  capturing = false;
  SAMPLE_CHECK(cudaStreamEndCapture_ptsz(nullptr, &graph));
  SAMPLE_CHECK(cudaGraphDestroy(graph));

  runtime_pair(5 * kMiB, nullptr, false);  // the legacy stream: never captured
  SAMPLE_CHECK(cudaStreamDestroy(stream));
  account.print();
  return 0;
}
