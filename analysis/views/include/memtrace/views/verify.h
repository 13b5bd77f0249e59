// memtrace's record held against CUPTI's own (memtrace run --verify): every allocation of device,
// managed and pinned host memory the calls recorded, and every one CUPTI's memory activity records
// saw, matched by address, size and kind. What only one side saw is listed: an allocation made
// some way memtrace does not see, or one memtrace recorded that the device never made.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memtrace/format/event.h"
#include "memtrace/views/report_render.h"

namespace memtrace {

struct UnmatchedAllocation {
  Api api = Api::kUnknown;  // recorded: the call; seen by CUPTI: cupti.memory_alloc
  MemKind kind = MemKind::kUnknown;
  int32_t device = -1;
  uint64_t addr = 0, size = 0;
  std::string location;  // where a recorded one was made
};

struct VerifyResult {
  ProcessId process;
  bool has_records = false;  // the trace holds CUPTI's records (made with --verify)
  uint64_t recorded = 0;     // allocations the calls made
  uint64_t seen_by_cupti = 0;
  std::vector<UnmatchedAllocation> only_recorded, only_cupti;  // MAX_LISTED of each at most
  uint64_t only_recorded_count = 0, only_cupti_count = 0;
  bool agree() const { return has_records && only_recorded_count == 0 && only_cupti_count == 0; }
};

// Compares the trace at PATH; false with ERROR set when it cannot be read.
bool verify_trace(const std::string& path, size_t max_listed, VerifyResult& out, std::string& error);

// memtrace verify: each process's comparison.
struct VerifyView {
  std::vector<VerifyResult> processes;
  bool compared() const;  // every process had CUPTI's records to compare with
  bool agree() const;
};
nlohmann::json to_json(const VerifyView& view);
std::string to_text(const VerifyView& view);

}  // namespace memtrace
