// PyTorch's caching allocator's actions (c10::cuda::CUDACachingAllocator::TraceEntry::Action, 2.1
// and later: SEGMENT_MAP and SEGMENT_UNMAP came before SNAPSHOT and OOM), by the number its trace
// trackers give and the name its snapshots write, and the API memtrace records each as. One table,
// for the injector (numbers), the snapshot importer (names) and the memory-viz export (names).
#pragma once

#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>

#include "memtrace/format/api.h"

namespace memtrace {

enum class TorchAction : int32_t {
  kAlloc,
  kFreeRequested,
  kFreeCompleted,
  kSegmentAlloc,
  kSegmentFree,
  kSegmentMap,
  kSegmentUnmap,
  kSnapshot,
  kOom,
};

struct TorchActionInfo {
  TorchAction action;
  std::string_view name;  // in a snapshot's device_traces
  Api api;                // as memtrace records it (a snapshot taken: none)
};

inline constexpr TorchActionInfo kTorchActions[] = {
    {TorchAction::kAlloc, "alloc", Api::kTorchAlloc},
    {TorchAction::kFreeRequested, "free_requested", Api::kTorchFree},
    {TorchAction::kFreeCompleted, "free_completed", Api::kTorchFreeCompleted},
    {TorchAction::kSegmentAlloc, "segment_alloc", Api::kTorchSegmentAlloc},
    {TorchAction::kSegmentFree, "segment_free", Api::kTorchSegmentFree},
    {TorchAction::kSegmentMap, "segment_map", Api::kTorchSegmentMap},
    {TorchAction::kSegmentUnmap, "segment_unmap", Api::kTorchSegmentUnmap},
    {TorchAction::kSnapshot, "snapshot", Api::kUnknown},
    {TorchAction::kOom, "oom", Api::kTorchOom},
};
static_assert(in_value_order(kTorchActions, 9, [](const TorchActionInfo& row) { return row.action; }),
              "one row per TorchAction, in PyTorch's order");

// The action numbered VALUE by a trace tracker; none for a number PyTorch does not give.
inline std::optional<TorchAction> torch_action(int32_t value) {
  if (value < 0 || static_cast<size_t>(value) >= std::size(kTorchActions)) return std::nullopt;
  return static_cast<TorchAction>(value);
}
// The action a snapshot names NAME; none for a name this table does not hold (a later version's).
inline std::optional<TorchAction> torch_action(std::string_view name) {
  for (const TorchActionInfo& info : kTorchActions)
    if (info.name == name) return info.action;
  return std::nullopt;
}
inline const TorchActionInfo& torch_action_info(TorchAction action) {
  return kTorchActions[static_cast<size_t>(action)];
}

}  // namespace memtrace
