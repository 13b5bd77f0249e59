// The stand-in NCCL: libnccl.so.2 with the calls a training job makes, allocating device and host
// memory as NCCL 2.27 does (NVIDIA/nccl, tag v2.27.7-1, paths under src/), over the simulated
// device. It moves no data: the ranks are processes of one job and the sums are not computed.
//
// As the real one it links the CUDA runtime statically (src/Makefile: CUDARTLIB ?= cudart_static)
// and takes the driver's functions from cudaGetDriverEntryPoint (misc/cudawrap.cc, LOAD_SYM), so
// none of its calls pass through the global symbols a preload interposes.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#define NCCL_API extern "C" __attribute__((visibility("default")))

namespace {

enum Result { kSuccess = 0, kUnhandledCudaError = 1, kInvalidArgument = 4, kInvalidUsage = 5 };
constexpr int kVersion = 22707;  // 2.27.7
struct UniqueId {
  char internal[128];
};

// Sizes, from src/init.cc computeBuffSizes and src/include/device.h (v2.27.7).
constexpr size_t kSimpleBuffSize = size_t(1) << 22;   // DEFAULT_BUFFSIZE, NCCL_BUFFSIZE
constexpr size_t kLlBuffSize = 8 * 512 * 8 * 16;      // NCCL_LL_LINES_PER_THREAD*threads*steps*16 B
constexpr size_t kLl128BuffSize = 120 * 640 * 8 * 8;  // NCCL_LL128 elements per thread*threads*steps*8 B
constexpr size_t kRecvMemBytes = 4096;                // sizeof(struct ncclRecvMem), page-aligned
constexpr size_t kSendMemBytes = 4096;                // sizeof(struct ncclSendMem)
constexpr size_t kWorkFifoBytes = size_t(1) << 20;    // NCCL_WORK_FIFO_BYTES default
constexpr size_t kDevCommAndChansBytes = 64 * 1024;   // sizeof(ncclDevCommAndChannels), about
constexpr size_t kDevPeersBytes = 4096;               // per channel: ncclDevChannelPeer * nRanks
constexpr int kDefaultChannels = 2;                   // what a small topology gets

// The driver's functions, as NCCL's cudawrap.cc loads them.
struct Driver {
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  bool loaded = false;
};
Driver driver;
std::once_flag driver_once;

template <typename Fn>
bool load(const char* name, Fn& fn) {
  cudaDriverEntryPointQueryResult found;
  void* p = nullptr;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) != cudaSuccess || !p) return false;
  fn = reinterpret_cast<Fn>(p);
  return true;
}

const Driver& driver_functions() {
  std::call_once(driver_once, [] {
    driver.loaded = load("cuMemGetAllocationGranularity", driver.granularity) && load("cuMemCreate", driver.create) &&
                    load("cuMemAddressReserve", driver.reserve) && load("cuMemMap", driver.map) &&
                    load("cuMemSetAccess", driver.set_access) && load("cuMemUnmap", driver.unmap) &&
                    load("cuMemRelease", driver.release) && load("cuMemAddressFree", driver.address_free);
  });
  return driver;
}

// misc/cudawrap.cc ncclCuMemEnable: NCCL_CUMEM_ENABLE, auto (-2) since 2.19: on where the driver
// has VMM (the simulated one does).
bool cumem_enabled() {
  const char* env = std::getenv("NCCL_CUMEM_ENABLE");
  return !(env && std::strcmp(env, "0") == 0) && driver_functions().loaded;
}

struct Buffer {
  void* ptr = nullptr;
  size_t size = 0;
  CUmemGenericAllocationHandle handle = 0;  // 0: cudaMalloc'd
};

// include/alloc.h ncclCuMemAlloc: the size rounded up to the granularity, a physical handle on
// the device, an address range, mapped, read-write.
Result cumem_alloc(Buffer& b, size_t size, CUmemAllocationGranularity_flags which) {
  const Driver& d = driver_functions();
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return kUnhandledCudaError;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  if (d.granularity(&granularity, &prop, which) != CUDA_SUCCESS || !granularity) return kUnhandledCudaError;
  size = (size + granularity - 1) / granularity * granularity;
  CUdeviceptr ptr = 0;
  if (d.create(&b.handle, size, &prop, 0) != CUDA_SUCCESS) return kUnhandledCudaError;
  if (d.reserve(&ptr, size, granularity, 0, 0) != CUDA_SUCCESS || d.map(ptr, size, 0, b.handle, 0) != CUDA_SUCCESS) {
    d.release(b.handle);
    return kUnhandledCudaError;
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  d.set_access(ptr, size, &access, 1);
  b.ptr = reinterpret_cast<void*>(ptr);
  b.size = size;
  return kSuccess;
}

// include/alloc.h ncclCudaCalloc: cuMem where enabled, else cudaMalloc; zeroed.
Result device_calloc(std::vector<Buffer>& owned, size_t size) {
  Buffer b;
  if (cumem_enabled()) {
    if (Result r = cumem_alloc(b, size, CU_MEM_ALLOC_GRANULARITY_MINIMUM); r != kSuccess) return r;
  } else {
    if (cudaMalloc(&b.ptr, size) != cudaSuccess) return kUnhandledCudaError;
    b.size = size;
  }
  cudaMemset(b.ptr, 0, b.size);
  owned.push_back(b);
  return kSuccess;
}

// ncclCuMemFree: unmapped, released, its range freed. (NCCL first retakes the handle from the
// address with cuMemRetainAllocationHandle and releases it twice; the simulated driver has no
// retain, so the stand-in releases the handle it kept, once.)
void device_free(const Buffer& b) {
  if (!b.handle) {
    cudaFree(b.ptr);
    return;
  }
  const Driver& d = driver_functions();
  const auto ptr = reinterpret_cast<CUdeviceptr>(b.ptr);
  d.unmap(ptr, b.size);
  d.release(b.handle);
  d.address_free(ptr, b.size);
}

struct Comm {
  int rank = 0, nranks = 0, channels = kDefaultChannels;
  bool connected = false;
  std::vector<Buffer> device;
  std::vector<void*> host;
};

int channel_count() {
  // NCCL_MAX_NCHANNELS bounds what the topology search gives (graph/search.cc).
  const char* env = std::getenv("NCCL_MAX_NCHANNELS");
  int n = env ? std::atoi(env) : kDefaultChannels;
  return n > 0 && n <= 64 ? n : kDefaultChannels;
}

// A ring's connections, made at the first collective (init.cc: runtimeConn = cuMemSupport &&
// NCCL_RUNTIME_CONNECT, default 1 since 2.22; group.cc ncclCollPreconnectFunc ->
// ncclTransportRingConnect): per channel, the receive side's buffer of every protocol
// (transport/p2p.cc p2pRecvSetup) and the send side's ncclSendMem (p2pSendSetup).
Result connect_ring(Comm& c) {
  for (int ch = 0; ch < c.channels; ++ch) {
    if (Result r = device_calloc(c.device, kRecvMemBytes + kSimpleBuffSize + kLlBuffSize + kLl128BuffSize); r) return r;
    if (Result r = device_calloc(c.device, kSendMemBytes); r) return r;
  }
  c.connected = true;
  return kSuccess;
}

}  // namespace

NCCL_API int ncclGetVersion(int* version) {
  if (!version) return kInvalidArgument;
  *version = kVersion;
  return kSuccess;
}

NCCL_API int ncclGetUniqueId(UniqueId* id) {
  if (!id) return kInvalidArgument;
  std::memset(id, 0, sizeof *id);
  std::snprintf(id->internal, sizeof id->internal, "memtrace-sim-nccl");
  return kSuccess;
}

// init.cc ncclCommInitRank -> ncclCommInitRankFunc: commAlloc, devCommSetup (the device comm and
// channels, ncclCudaCallocAsync; the work FIFO in mapped host memory, ncclCudaHostCalloc ->
// cudaHostAlloc), initChannel per channel (devPeers and devRingUserRanks, ncclCudaCallocAsync).
// Without runtime connection (cuMem off) the rings connect here too.
NCCL_API int ncclCommInitRank(Comm** comm, int nranks, UniqueId, int rank) {
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return kInvalidArgument;
  auto* c = new Comm;
  c->rank = rank;
  c->nranks = nranks;
  c->channels = channel_count();
  Result r = device_calloc(c->device, kDevCommAndChansBytes);
  void* fifo = nullptr;
  if (!r && cudaHostAlloc(&fifo, kWorkFifoBytes, cudaHostAllocMapped) != cudaSuccess) r = kUnhandledCudaError;
  if (fifo) c->host.push_back(fifo);
  for (int ch = 0; !r && ch < c->channels; ++ch) {
    r = device_calloc(c->device, kDevPeersBytes * static_cast<size_t>(nranks));
    if (!r) r = device_calloc(c->device, sizeof(int) * static_cast<size_t>(nranks));
  }
  if (!r && !cumem_enabled()) r = connect_ring(*c);
  if (r) {
    for (const Buffer& b : c->device) device_free(b);
    for (void* h : c->host) cudaFreeHost(h);
    delete c;
    return r;
  }
  *comm = c;
  return kSuccess;
}

NCCL_API int ncclAllReduce(const void*, void*, size_t, int, int, Comm* comm, cudaStream_t) {
  if (!comm) return kInvalidArgument;
  if (!comm->connected) return connect_ring(*comm);
  return kSuccess;
}

NCCL_API int ncclBroadcast(const void*, void*, size_t, int, int, Comm* comm, cudaStream_t) {
  if (!comm) return kInvalidArgument;
  if (!comm->connected) return connect_ring(*comm);
  return kSuccess;
}

// init.cc (allocator.cc from 2.27) ncclMemAlloc: cuMem at the recommended granularity where
// enabled, else cudaMalloc.
std::mutex mem_lock;
std::vector<Buffer> mem_buffers;

NCCL_API int ncclMemAlloc(void** ptr, size_t size) {
  if (!ptr || !size) return kInvalidArgument;
  Buffer b;
  if (cumem_enabled()) {
    if (Result r = cumem_alloc(b, size, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED); r) return r;
  } else {
    if (cudaMalloc(&b.ptr, size) != cudaSuccess) return kUnhandledCudaError;
    b.size = size;
  }
  std::lock_guard<std::mutex> hold(mem_lock);
  mem_buffers.push_back(b);
  *ptr = b.ptr;
  return kSuccess;
}

NCCL_API int ncclMemFree(void* ptr) {
  std::lock_guard<std::mutex> hold(mem_lock);
  for (size_t i = 0; i < mem_buffers.size(); ++i)
    if (mem_buffers[i].ptr == ptr) {
      device_free(mem_buffers[i]);
      mem_buffers.erase(mem_buffers.begin() + static_cast<std::ptrdiff_t>(i));
      return kSuccess;
    }
  return kInvalidArgument;
}

// init.cc ncclCommDestroy -> commReclaim -> commFree: every buffer freed, the host ones by
// cudaFreeHost.
NCCL_API int ncclCommDestroy(Comm* comm) {
  if (!comm) return kInvalidArgument;
  for (const Buffer& b : comm->device) device_free(b);
  for (void* h : comm->host) cudaFreeHost(h);
  delete comm;
  return kSuccess;
}
