// What the allocated layer's blocks are, in PyTorch's terms: parameter, gradient, optimizer
// state (as memtrace's Python shim saw them at each optimizer step: torch.category events),
// activation, temporary, input, or other (from when they lived: the shim marks backward passes
// and optimizer steps, and forward is the rest of a step). A block's category is known when it
// dies (or at the end), so the tracker keeps the blocks live at each device's peak until it knows
// theirs. Memory grows with the live set, not with the trace.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "memtrace/engine/replay.h"

namespace memtrace {

enum class Category : uint8_t {
  kParameter,
  kGradient,
  kOptimizerState,
  kActivation,
  kTemporary,
  kInput,
  kOther,
  kUnknown,  // the trace says nothing of categories (no PyTorch, or the shim was not in it)
  kCount
};
inline constexpr std::string_view kCategoryNames[] = {"parameter", "gradient", "optimizer_state", "activation",
                                                      "temporary", "input",    "other",           "unknown"};
std::string_view category_name(Category c);
// The category a name means; kUnknown for any other name.
Category category_named(std::string_view name);

struct CategoryTotal {
  Category category = Category::kUnknown;
  uint64_t bytes = 0, count = 0;
};

class CategoryTracker {
 public:
  // KEEP_ALL: remember every block's category (for exports), not only those live at a peak.
  explicit CategoryTracker(bool keep_all = false) : keep_all_(keep_all) {}

  // Feeds one event after the replay applied it: STEP_INDEX is the step it falls in, NAME the
  // name of a mark, range or category.
  void add(const Event& e, const ReplayStep& step, const Replay& replay, uint64_t step_index, std::string_view name);
  // The trace ended: blocks still live get their categories.
  void finish();

  // Whether the trace told categories (the shim's tags or phases were in it).
  bool known() const { return known_; }
  // The blocks live at DEVICE's peak of the allocated layer, by category, largest first.
  std::vector<CategoryTotal> at_peak(int32_t device) const;
  // With keep_all: the category of the block the allocation numbered N made (n-th torch.alloc or
  // region of the trace, from 0).
  Category category_of_allocation(uint64_t n) const;

 private:
  enum class Phase : uint8_t { kForward, kBackward, kOptimizer };
  struct Block {
    uint64_t id, size;
    int32_t device;
    uint64_t step;
    Phase phase;
    uint64_t backwards;  // backward passes begun before it was allocated
    int8_t tag = -1;     // a Category from the shim, or none
  };
  Phase phase() const;
  Category decide(const Block& b, bool freed, uint64_t step, Phase phase) const;
  void settle(const Block& b, Category c);
  void save_peak(int32_t device);

  bool keep_all_;
  bool known_ = false;
  uint64_t next_id_ = 0;
  std::map<uint64_t, Block> live_;                           // by address
  std::unordered_map<uint32_t, std::vector<Phase>> ranges_;  // open shim ranges by thread (kForward: another)
  uint32_t backward_open_ = 0, optimizer_open_ = 0;
  uint64_t backwards_ = 0;  // backward passes begun
  // Peaks of the allocated layer: the bytes, whether the blocks live then are saved yet, and
  // their ids; settled categories of those ids.
  struct DevicePeak {
    uint64_t bytes = 0;
    bool unsaved = false;
    std::vector<uint64_t> blocks;
    std::vector<uint64_t> sizes;
  };
  std::map<int32_t, DevicePeak> peaks_;
  std::unordered_set<uint64_t> wanted_;  // ids in some saved peak
  std::unordered_map<uint64_t, Category> settled_;
  std::vector<Category> all_;  // keep_all: by id
};

}  // namespace memtrace
