// PYTORCH_CUDA_ALLOC_CONF as PyTorch's CUDAAllocatorConfig reads it (c10/cuda/CUDAAllocatorConfig.cpp,
// v2.6.0): the options that decide where blocks go, with PyTorch's own checks and its messages.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace memtrace::torch_model {

// kRoundUpPowerOfTwoIntervals: one division count per power-of-two interval from 1 MiB to 64 GiB.
inline constexpr size_t kRoundupIntervals = 16;

struct AllocConf {
  size_t max_split_size = std::numeric_limits<size_t>::max();  // max_split_size_mb, in bytes
  // max_non_split_rounding_mb (2.5 on, PR #136174): how much larger than a request of
  // max_split_size or more a cached block may be and still serve it.
  size_t max_non_split_rounding_size = 20971520;
  double garbage_collection_threshold = 0;
  bool expandable_segments = false;
  std::array<size_t, kRoundupIntervals> roundup_power2_divisions{};  // 0: no power-of-two rounding
  std::string backend = "native";                                    // backend: native or cudaMallocAsync

  // The divisions for a request of SIZE bytes (CUDAAllocatorConfig::roundup_power2_divisions(size)).
  size_t divisions_for(size_t size) const;
  // The options that differ from PyTorch's defaults, in PyTorch's syntax ("" for none).
  std::string text() const;
  bool operator==(const AllocConf&) const = default;
};

// Parses TEXT as CUDAAllocatorConfig::parseArgs does. Options that place no blocks
// (pinned_*, release_lock_on_cudamalloc, ...) are accepted and ignored. Empty with ERROR set to
// the sentence PyTorch's check gives (naming the option) where PyTorch would refuse TEXT.
std::optional<AllocConf> parse_alloc_conf(std::string_view text, std::string& error);

}  // namespace memtrace::torch_model
