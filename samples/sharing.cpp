// Memory shared between processes, as torch.multiprocessing and NCCL share it. The exporter
// allocates 4 MiB with cudaMalloc and hands it out as an IPC handle, 1 MiB from its stream-ordered
// pool handed out by pointer (cudaMemPoolExportPointer), creates 2 MiB of VMM physical memory,
// fills it and hands it out as a file descriptor, then runs itself again as the importer and waits
// for it. The importer opens the IPC handle and closes it, imports the pool's allocation
// (cudaMemPoolImportPointer) and frees it, imports the physical memory, maps it, checks what the
// exporter wrote, unmaps and releases it, and creates a 2 MiB multicast object (a failed call where
// the GPU has no multicast); it gets those two driver functions from cuGetProcAddress, as NCCL
// does. What the importer opens is the exporter's memory: its own peak is 0.
//   sharing                                     (the exporter)
//   sharing --import IPC_HEX FD POOL_POINTER_HEX  (the importer)
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "sample_account.h"

extern char** environ;

namespace {

sample::Account account;
constexpr size_t kMiB = 1 << 20;
constexpr unsigned char kPattern = 0x5a;

template <typename Result>
void check(const char* api, Result r) {
  account.call(api, r == 0);
  SAMPLE_CHECK(r);
}

template <typename Fn>
Fn driver_function(const char* name) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  SAMPLE_CHECK(cuGetProcAddress(name, &fn, 12080, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  SAMPLE_CHECK(status != CU_GET_PROC_ADDRESS_SUCCESS);
  return reinterpret_cast<Fn>(fn);
}

// An IPC handle or a pool pointer's export data (64 bytes), as text on a command line.
template <typename Handle>
std::string to_hex(const Handle& handle) {
  std::string hex;
  char byte[3];
  for (unsigned char c : handle.reserved) {
    std::snprintf(byte, sizeof byte, "%02x", static_cast<unsigned>(c));
    hex += byte;
  }
  return hex;
}

template <typename Handle>
Handle from_hex(const std::string& hex) {
  Handle handle{};
  for (size_t i = 0; i < sizeof handle.reserved && 2 * i + 1 < hex.size(); ++i)
    handle.reserved[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return handle;
}

CUmemAllocationProp device_memory() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// Maps HANDLE's SIZE bytes at a new reservation, readable and writable from device 0.
CUdeviceptr map(CUmemGenericAllocationHandle handle, size_t size) {
  CUdeviceptr va = 0;
  check("cuMemAddressReserve", cuMemAddressReserve(&va, size, 0, 0, 0));
  check("cuMemMap", cuMemMap(va, size, 0, handle, 0));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  SAMPLE_CHECK(cuMemSetAccess(va, size, &access, 1));
  return va;
}

void unmap(CUdeviceptr va, size_t size) {
  check("cuMemUnmap", cuMemUnmap(va, size));
  check("cuMemAddressFree", cuMemAddressFree(va, size));
}

int import(const std::string& ipc_hex, int fd, const std::string& pool_hex) {
  void* peer = nullptr;
  check("cudaIpcOpenMemHandle",
        cudaIpcOpenMemHandle(&peer, from_hex<cudaIpcMemHandle_t>(ipc_hex), cudaIpcMemLazyEnablePeerAccess));
  check("cudaIpcCloseMemHandle", cudaIpcCloseMemHandle(peer));

  cudaMemPool_t pool;
  SAMPLE_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  auto export_data = from_hex<cudaMemPoolPtrExportData>(pool_hex);
  void* pooled = nullptr;
  check("cudaMemPoolImportPointer", cudaMemPoolImportPointer(&pooled, pool, &export_data));
  check("cudaFree", cudaFree(pooled));

  const auto import_handle =
      driver_function<decltype(&cuMemImportFromShareableHandle)>("cuMemImportFromShareableHandle");
  const auto create_multicast = driver_function<decltype(&cuMulticastCreate)>("cuMulticastCreate");
  CUmemGenericAllocationHandle imported = 0;
  check("cuMemImportFromShareableHandle", import_handle(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  ::close(fd);
  CUdeviceptr va = map(imported, 2 * kMiB);
  unsigned char seen[16] = {};
  SAMPLE_CHECK(cuMemcpy(reinterpret_cast<CUdeviceptr>(seen), va, sizeof seen));
  if (seen[0] != kPattern || seen[15] != kPattern) {
    std::fprintf(stderr, "sharing: the imported memory does not hold what the exporter wrote\n");
    return 1;
  }
  unmap(va, 2 * kMiB);
  check("cuMemRelease", cuMemRelease(imported));

  CUmulticastObjectProp multicast{};
  multicast.numDevices = 1;
  multicast.size = 2 * kMiB;
  multicast.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle group = 0;
  CUresult r = create_multicast(&group, &multicast);
  account.call("cuMulticastCreate", r == CUDA_SUCCESS);
  if (r == CUDA_SUCCESS) check("cuMemRelease", cuMemRelease(group));
  account.print();
  return 0;
}

int run_importer(const char* self, const std::string& ipc_hex, int fd, const std::string& pool_hex) {
  ::fcntl(fd, F_SETFD, 0);  // handed to the importer
  std::string fd_text = std::to_string(fd);
  char* args[] = {const_cast<char*>(self), const_cast<char*>("--import"),       const_cast<char*>(ipc_hex.c_str()),
                  fd_text.data(),          const_cast<char*>(pool_hex.c_str()), nullptr};
  pid_t pid = 0;
  if (::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, args, environ) != 0) return 1;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--import") return import(argv[2], std::atoi(argv[3]), argv[4]);

  void* buffer = nullptr;
  check("cudaMalloc", cudaMalloc(&buffer, 4 * kMiB));
  account.live(0, 4 * kMiB);
  cudaIpcMemHandle_t ipc;
  SAMPLE_CHECK(cudaIpcGetMemHandle(&ipc, buffer));
  void* pooled = nullptr;
  check("cudaMallocAsync", cudaMallocAsync(&pooled, kMiB, nullptr));
  account.live(0, kMiB);
  cudaMemPoolPtrExportData pool_pointer;
  SAMPLE_CHECK(cudaMemPoolExportPointer(&pool_pointer, pooled));

  CUmemAllocationProp prop = device_memory();
  CUmemGenericAllocationHandle physical = 0;
  check("cuMemCreate", cuMemCreate(&physical, 2 * kMiB, &prop, 0));
  account.live(0, 2 * kMiB);
  CUdeviceptr va = map(physical, 2 * kMiB);
  SAMPLE_CHECK(cuMemsetD8(va, kPattern, 2 * kMiB));
  int fd = -1;
  SAMPLE_CHECK(cuMemExportToShareableHandle(&fd, physical, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));

  const int importer = run_importer(argv[0], to_hex(ipc), fd, to_hex(pool_pointer));
  ::close(fd);
  check("cudaFreeAsync", cudaFreeAsync(pooled, nullptr));
  account.live(0, -static_cast<int64_t>(kMiB));
  unmap(va, 2 * kMiB);
  check("cuMemRelease", cuMemRelease(physical));
  account.live(0, -static_cast<int64_t>(2 * kMiB));
  check("cudaFree", cudaFree(buffer));
  account.live(0, -static_cast<int64_t>(4 * kMiB));
  account.print();
  return importer;
}
