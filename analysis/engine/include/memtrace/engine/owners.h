// Who holds the device: every byte's owner. An allocation belongs to the library whose code
// called CUDA (the first module outside the CUDA libraries, going outwards from the call): NCCL,
// cuBLAS, cuDNN, any other library by its file name, PyTorch's allocator, or the program itself.
// At a device's reserved peak the owners of what was reserved, PyTorch's split into its tensors
// and its cache, and from the device layer what no allocation API holds (graphs' memory, pools'
// reserve, other processes, the CUDA context) add up to what the device held.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "memtrace/engine/outside_parts.h"
#include "memtrace/engine/pass.h"
#include "memtrace/engine/stacks.h"
#include "memtrace/engine/timeline.h"

namespace memtrace {

struct DeviceReport;

enum class OwnerKind {
  kProgram,         // the program's own code called CUDA (a Python program through ctypes too)
  kLibrary,         // a library: NCCL, cuBLAS, cuDNN, libfoo
  kPyTorch,         // PyTorch's caching allocator (its segments)
  kPyTorchTensors,  // of PyTorch's segments, what its tensors held (the allocated layer)
  kPyTorchCache,    // of PyTorch's segments, the rest: cached blocks, rounding, fragments
  kPyTorchPool,     // of PyTorch's segments, a private pool's: a CUDA graph's, a MemPool's
  kGraphs,          // CUDA graphs' memory nodes (the device layer)
  kPools,           // stream-ordered pools' reserve beyond their allocations
  kOtherProcesses,  // other processes on the device (NVML)
  kContext,         // the CUDA context and its loaded modules, as at the device's first sample
  kUnexplained,     // what the device held beyond all the rest
  kUnplaced,        // reserved by a call whose stack names no module (no stack, an older memtrace)
};
const char* owner_kind_name(OwnerKind kind);

// Who made an allocation: OWNER names it ("NCCL", "cuBLAS", "libfoo", "the program"); for a
// library, PART says the call into it and who made that call ("ncclCommInitRank ← setup at
// train.py:40"): NCCL's memory per communicator, as the call that created it names it.
struct Owner {
  OwnerKind kind = OwnerKind::kUnplaced;
  std::string name;
  std::string part;
};
// STACK: innermost first, with the CUDA libraries' frames (StackView::all_frames).
Owner owner_of(const std::vector<FrameView>& stack);

struct OwnerPart {
  std::string name;
  uint64_t bytes = 0;
  uint64_t count = 0;
};

// One row of "who held the device".
struct OwnerShare {
  OwnerKind kind = OwnerKind::kUnplaced;
  std::string owner;
  uint64_t bytes = 0;
  uint64_t count = 0;            // allocations (none for the device layer's rows)
  std::vector<OwnerPart> parts;  // a library's, by the call that made them, largest first
  std::string why;               // what the row is, where the name does not say
  uint64_t tensors_bytes = 0;    // a private pool's: of its bytes, what its tensors held
};

// One owner's reserved bytes over time on one device (timeline --by owner).
struct OwnerSeries {
  std::string owner;
  TimelineSeries series;
};

// A pass over the reserved and allocated layers and the device layer's samples: per device, the
// reserved bytes of each owner at the reserved layer's peak (the same moment ReportBuilder's
// peak is), the allocated layer's bytes then, and what the device held outside at its first
// sample (the context).
class OwnerTracker : public Pass {
 public:
  // ALL_PYTORCH: every reserved allocation is PyTorch's (a trace imported from its snapshot,
  // whose segments' stacks are the Python that asked for them).
  // TIMELINE: keep each owner's reserved bytes over time too (timeline()).
  OwnerTracker(const StackView& stacks, bool all_pytorch, bool timeline = false)
      : stacks_(stacks), all_pytorch_(all_pytorch), timeline_(timeline) {}
  unsigned looks_at() const override { return kEveryEvent; }
  void on_event(const Event& event, const ReplayStep& step, const Replay& replay) override;
  void finish(uint64_t end_ns) override;

  // The rows for DEVICE (its reserved layer's report), largest first; they add up to the device at
  // the peak (DeviceReport::device_at_peak_bytes) when it was sampled, else to the reserved peak.
  // PYTORCH: the allocated layer is PyTorch's tensors, split out of its segments.
  std::vector<OwnerShare> at_peak(const DeviceReport& device, bool pytorch) const;
  // Each owner's reserved bytes over time, per device, largest peak first (after finish()).
  std::vector<OwnerSeries> timeline() { return std::move(series_); }
  // At each out-of-memory (ProcessReport::oom_events, in their order): the rows then, adding up
  // to what the failed call reported in use on the device.
  std::vector<std::vector<OwnerShare>> at_ooms(bool pytorch) const;

 private:
  struct Live {
    uint64_t bytes = 0, count = 0;
  };
  // A private pool of PyTorch's on a device: its segments and the tensors in them. OWN: its
  // segments are PyTorch's reserved memory (not a MemPool allocator's of another library).
  struct PoolLive {
    uint64_t reserved = 0, allocated = 0;
    bool own = true;
  };
  using Pools = std::map<uint64_t, PoolLive>;  // by torch_pool_key
  // What lay outside the reserved layer at a moment.
  struct DeviceLayer {
    bool sampled = false;
    uint64_t outside = 0;
    OutsideParts parts;
    uint64_t context = 0;
    const char* tensors_why = "";
  };
  struct OomMoment {
    std::vector<Live> slots;
    uint64_t allocated = 0;
    DeviceLayer layer;
    Pools pools;
  };
  std::vector<OwnerShare> rows(const std::vector<Live>& live_slots, uint64_t allocated, const Pools& pools,
                               bool pytorch, const DeviceLayer& layer) const;
  void on_pool_segment(const Event& event);
  struct DeviceState {
    uint64_t live = 0, peak = 0;
    uint64_t allocated_live = 0, allocated_at_peak = 0;
    bool peak_unsaved = false;  // the owners at the newest peak are not in at_peak yet
    bool standing = false;      // nothing was freed since the newest peak
    std::vector<Live> slots, at_peak;
    bool sampled = false;
    uint64_t outside_at_first_sample = 0;
    std::vector<uint64_t> by_name;  // live bytes per owner name (timeline)
    OutsideParts parts;             // the newest of what pools, graphs and other processes held
    Pools pools, pools_at_peak;
    // The pools as they are, while the newest peak stands: what they held at it.
    void keep_pools_while_standing() {
      if (standing) pools_at_peak = pools;
    }
  };
  uint32_t slot_of(uint64_t stack_id);
  uint32_t slot_of(Owner owner);

  const StackView& stacks_;
  bool all_pytorch_;
  bool timeline_;
  std::vector<std::string> names_;      // owner names, each once (timeline)
  std::vector<uint32_t> name_of_slot_;  // slot -> its owner's name
  std::vector<Timeline> timelines_;     // by owner name
  std::vector<OwnerSeries> series_;
  std::vector<OomMoment> ooms_;
  std::vector<Owner> owners_;                        // by slot
  std::unordered_map<std::string, uint32_t> slots_;  // owner and part -> slot
  std::unordered_map<uint64_t, uint32_t> by_stack_;  // stack id -> slot
  std::unordered_map<int32_t, DeviceState> devices_;
  // The segments of PyTorch's private pools (pages, for expandable ones), by address: size, pool.
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> pool_segments_;
  // The tensors in private pools' segments, by address: their pool.
  std::unordered_map<uint64_t, uint64_t> pool_tensors_;
  // PyTorch's own reserved memory, by address: what tells a pool's segment PyTorch's.
  std::unordered_set<uint64_t> pytorch_reserved_;
};

}  // namespace memtrace
