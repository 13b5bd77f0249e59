// Virtual memory management the way PyTorch's expandable segments use it: one large VA
// reservation; physical 2 MiB pages created, mapped and made accessible as the segment grows,
// unmapped and released as it shrinks. The driver functions come from
// cudaGetDriverEntryPointByVersion, as PyTorch gets them.
//   vmm [--grow-pages N] [--rounds R]
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <vector>

#include "driver_entry.h"
#include "sample_account.h"

namespace {

sample::Account account;

struct Driver {
  decltype(&cuMemCreate) create = sample::driver_entry<decltype(&cuMemCreate)>("cuMemCreate");
  decltype(&cuMemRelease) release = sample::driver_entry<decltype(&cuMemRelease)>("cuMemRelease");
  decltype(&cuMemMap) map = sample::driver_entry<decltype(&cuMemMap)>("cuMemMap");
  decltype(&cuMemUnmap) unmap = sample::driver_entry<decltype(&cuMemUnmap)>("cuMemUnmap");
  decltype(&cuMemSetAccess) set_access = sample::driver_entry<decltype(&cuMemSetAccess)>("cuMemSetAccess");
  decltype(&cuMemAddressReserve) reserve = sample::driver_entry<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
  decltype(&cuMemAddressFree) address_free = sample::driver_entry<decltype(&cuMemAddressFree)>("cuMemAddressFree");
};

void check(const char* api, CUresult r) {
  account.call(api, r == CUDA_SUCCESS);
  SAMPLE_CHECK(r);
}

}  // namespace

int main(int argc, char** argv) {
  const long grow_pages = sample::arg_value(argc, argv, "--grow-pages", 24);
  const long rounds = sample::arg_value(argc, argv, "--rounds", 3);
  SAMPLE_CHECK(cudaSetDevice(0));
  Driver cu;

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t page = 0;
  SAMPLE_CHECK(cuMemGetAllocationGranularity(&page, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));

  const size_t reserved = static_cast<size_t>(grow_pages + rounds) * page * 2;
  CUdeviceptr base = 0;
  check("cuMemAddressReserve", cu.reserve(&base, reserved, 0, 0, 0));

  std::vector<CUmemGenericAllocationHandle> pages;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (long round = 0; round < rounds; ++round) {
    // Grow: each round reaches one page further than the last.
    while (static_cast<long>(pages.size()) < grow_pages + round) {
      CUmemGenericAllocationHandle h;
      check("cuMemCreate", cu.create(&h, page, &prop, 0));
      account.live(0, static_cast<int64_t>(page));
      CUdeviceptr at = base + pages.size() * page;
      check("cuMemMap", cu.map(at, page, 0, h, 0));
      SAMPLE_CHECK(cu.set_access(at, page, &access, 1));
      pages.push_back(h);
    }
    // Shrink to half.
    while (static_cast<long>(pages.size()) > (grow_pages + round) / 2) {
      CUdeviceptr at = base + (pages.size() - 1) * page;
      check("cuMemUnmap", cu.unmap(at, page));
      check("cuMemRelease", cu.release(pages.back()));
      account.live(0, -static_cast<int64_t>(page));
      pages.pop_back();
    }
  }
  while (!pages.empty()) {
    check("cuMemUnmap", cu.unmap(base + (pages.size() - 1) * page, page));
    check("cuMemRelease", cu.release(pages.back()));
    account.live(0, -static_cast<int64_t>(page));
    pages.pop_back();
  }
  check("cuMemAddressFree", cu.address_free(base, reserved));
  account.print();
  return 0;
}
