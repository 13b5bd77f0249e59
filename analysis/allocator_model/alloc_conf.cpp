// CUDAAllocatorConfig::lexArgs and parseArgs (c10/cuda/CUDAAllocatorConfig.cpp, v2.6.0), for the
// options that place blocks; the messages are PyTorch's own checks'.
#include "memtrace/allocator_model/alloc_conf.h"

#include <cerrno>
#include <cstdlib>
#include <vector>

namespace memtrace::torch_model {

namespace {

constexpr size_t kMiB = 1048576, kLargeBuffer = 20971520;

bool power_of_two(uint64_t v) { return v && !(v & (v - 1)); }
size_t log2_floor(uint64_t v) { return 63 - static_cast<size_t>(__builtin_clzll(v)); }

// lexArgs: ',', ':', '[' and ']' are tokens of their own; spaces separate nothing and are dropped.
std::vector<std::string> lex(std::string_view text) {
  std::vector<std::string> tokens;
  std::string word;
  for (char c : text) {
    if (c == ',' || c == ':' || c == '[' || c == ']') {
      if (!word.empty()) tokens.push_back(word);
      word.clear();
      tokens.emplace_back(1, c);
    } else if (c != ' ') {
      word += c;
    }
  }
  if (!word.empty()) tokens.push_back(word);
  return tokens;
}

class Parser {
 public:
  Parser(std::vector<std::string> tokens, std::string& error) : t_(std::move(tokens)), error_(error) {}

  std::optional<AllocConf> parse() {
    AllocConf c;
    for (i_ = 0; i_ < t_.size(); ++i_) {
      const std::string key = t_[i_];
      if (!expect(':', key)) return std::nullopt;
      bool ok = true;
      if (key == "max_split_size_mb")
        ok = megabytes(key, c.max_split_size);
      else if (key == "max_non_split_rounding_mb")
        ok = megabytes(key, c.max_non_split_rounding_size);
      else if (key == "garbage_collection_threshold")
        ok = gc_threshold(c);
      else if (key == "roundup_power2_divisions")
        ok = roundup(c);
      else if (key == "expandable_segments")
        ok = boolean(key, "Expected a single True/False argument for expandable_segments", c.expandable_segments);
      else if (key == "backend")
        ok = backend(c);
      else if (key == "release_lock_on_cudamalloc" || key == "release_lock_on_hipmalloc" ||
               key == "pinned_use_cuda_host_register" || key == "pinned_use_hip_host_register" ||
               key == "pinned_use_background_threads") {
        bool ignored = false;
        ok = boolean(key, "Expected a single True/False argument for " + key, ignored);
      } else if (key == "pinned_num_register_threads") {  // the host allocator's: checked, not kept
        auto text = next_value(key);
        auto v = text ? number(key, *text) : std::nullopt;
        ok = v.has_value();
        if (ok && (!power_of_two(*v) || *v > 128)) {
          error_ = "Number of register threads has to be power of 2 ";
          ok = false;
        }
      } else {
        error_ = "Unrecognized CachingAllocator option: " + key;
        return std::nullopt;
      }
      if (!ok) return std::nullopt;
      if (i_ + 1 < t_.size() && !expect(',', key)) return std::nullopt;
    }
    return c;
  }

 private:
  // consumeToken: the next token must be C.
  bool expect(char c, const std::string& key) {
    if (++i_ < t_.size() && t_[i_] == std::string(1, c)) return true;
    error_ = "Error parsing CachingAllocator settings, expected " + std::string(1, c) + " after " + key;
    return false;
  }
  std::optional<std::string> next_value(const std::string& key) {
    if (++i_ < t_.size()) return t_[i_];
    error_ = "Error, expecting " + key + " value";
    return std::nullopt;
  }
  // std::stoi / std::stoul as PyTorch calls them: a sign and the leading digits (what follows them is
  // ignored); none, or past what an int (stoi) holds, is refused. A negative value, stored in a
  // size_t as PyTorch stores it, wraps.
  std::optional<uint64_t> number(const std::string& key, const std::string& text, bool int_range = true) {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(text.c_str(), &end, 10);
    if (end == text.c_str() || errno || (int_range && (v > INT32_MAX || v < INT32_MIN))) {
      error_ = "Error parsing CachingAllocator option " + key + ": '" + text + "' is not a number it takes";
      return std::nullopt;
    }
    return static_cast<uint64_t>(v);
  }

  // parseMaxSplitSize, parseMaxNonSplitRoundingSize (v2.6.0): more than 20 MiB (2.9-era main: 20 or
  // more); a negative value wraps past every check to the most a size_t holds in MiB.
  bool megabytes(const std::string& key, size_t& out) {
    auto text = next_value(key);
    if (!text) return false;
    auto mb = number(key, *text);
    if (!mb) return false;
    if (*mb <= kLargeBuffer / kMiB) {
      error_ = "CachingAllocator option " + key + " too small, must be > " + std::to_string(kLargeBuffer / kMiB);
      return false;
    }
    out = std::min<uint64_t>(*mb, SIZE_MAX / kMiB) * kMiB;
    return true;
  }

  bool gc_threshold(AllocConf& c) {
    auto text = next_value("garbage_collection_threshold");
    if (!text) return false;
    char* end = nullptr;
    double v = std::strtod(text->c_str(), &end);  // std::stod: the leading number
    if (end == text->c_str()) {
      error_ = "Error parsing CachingAllocator option garbage_collection_threshold: '" + *text + "' is not a number";
      return false;
    }
    if (!(v > 0)) {
      error_ = "garbage_collect_threshold too small, set it 0.0~1.0";
      return false;
    }
    if (!(v < 1.0)) {
      error_ = "garbage_collect_threshold too big, set it 0.0~1.0";
      return false;
    }
    c.garbage_collection_threshold = v;
    return true;
  }

  // The single number (every interval) or the list "[256:1,512:2,>:8]" of interval (MiB, a
  // power of two, or ">" for every one after the last named) and divisions (0 or a power of two).
  bool roundup(AllocConf& c) {
    const std::string key = "roundup_power2_divisions";
    auto first = next_value(key);
    if (!first) return false;
    auto& d = c.roundup_power2_divisions;
    if (*first != "[") {
      auto v = number(key, *first);
      if (!v) return false;
      if (!power_of_two(*v)) {
        error_ = "For roundups, the divisons has to be power of 2 ";
        return false;
      }
      d.fill(*v);
      return true;
    }
    size_t last_index = 0;
    bool first_value = true;
    while (++i_ < t_.size() && t_[i_] != "]") {
      const std::string interval = t_[i_];
      if (!expect(':', key)) return false;
      auto text = next_value(key);
      if (!text) return false;
      auto divisions = number(key, *text);
      if (!divisions) return false;
      if (*divisions != 0 && !power_of_two(*divisions)) {
        error_ = "For roundups, the divisons has to be power of 2 or 0 to disable roundup ";
        return false;
      }
      if (interval == ">") {
        for (size_t k = last_index; k < d.size(); ++k) d[k] = *divisions;
      } else {
        auto mb = number(key, interval, /*int_range=*/false);  // std::stoul
        if (!mb) return false;
        if (!power_of_two(*mb)) {
          error_ = "For roundups, the intervals have to be power of 2 ";
          return false;
        }
        size_t index = std::min(log2_floor(*mb), d.size() - 1);
        if (first_value)  // the first interval named also covers those below it
          for (size_t k = 0; k < index; ++k) d[k] = *divisions;
        first_value = false;
        d[index] = *divisions;
        last_index = index;
      }
      if (i_ + 1 < t_.size() && t_[i_ + 1] != "]" && !expect(',', key)) return false;
    }
    if (i_ >= t_.size()) {
      error_ = "Error parsing CachingAllocator option roundup_power2_divisions: no closing ]";
      return false;
    }
    return true;
  }

  bool boolean(const std::string& key, const std::string& message, bool& out) {
    auto v = next_value(key);
    if (!v) return false;
    if (*v != "True" && *v != "False") {
      error_ = message;
      return false;
    }
    out = *v == "True";
    return true;
  }

  bool backend(AllocConf& c) {
    auto v = next_value("backend");
    if (!v) return false;
    if (*v != "native" && *v != "cudaMallocAsync") {
      error_ = "Unknown allocator backend, options are native and cudaMallocAsync";
      return false;
    }
    c.backend = *v;
    return true;
  }

  std::vector<std::string> t_;
  size_t i_ = 0;
  std::string& error_;
};

}  // namespace

// Intervals from 1 MiB to 64 GiB, a request below 1 MiB in the first, above 32 GiB in the last.
size_t AllocConf::divisions_for(size_t size) const {
  const size_t log_size = size ? log2_floor(size) : 0, interval_start = log2_floor(kMiB);
  size_t index = log_size > interval_start ? log_size - interval_start : 0;
  return roundup_power2_divisions[std::min(index, kRoundupIntervals - 1)];
}

std::string AllocConf::text() const {
  std::string out;
  auto add = [&](const std::string& item) { out += (out.empty() ? "" : ",") + item; };
  if (backend != "native") add("backend:" + backend);
  if (expandable_segments) add("expandable_segments:True");
  if (max_split_size != std::numeric_limits<size_t>::max())
    add("max_split_size_mb:" + std::to_string(max_split_size / kMiB));
  if (max_non_split_rounding_size != kLargeBuffer)
    add("max_non_split_rounding_mb:" + std::to_string(max_non_split_rounding_size / kMiB));
  if (garbage_collection_threshold > 0) {
    std::string v = std::to_string(garbage_collection_threshold);
    while (v.size() > 3 && v.back() == '0') v.pop_back();
    add("garbage_collection_threshold:" + v);
  }
  bool any = false, same = true;
  for (size_t d : roundup_power2_divisions) {
    any |= d != 0;
    same &= d == roundup_power2_divisions[0];
  }
  if (any && same) {
    add("roundup_power2_divisions:" + std::to_string(roundup_power2_divisions[0]));
  } else if (any) {
    std::string list;
    for (size_t k = 0; k < kRoundupIntervals; ++k)
      list += (k ? "," : "") + std::to_string(size_t(1) << k) + ":" + std::to_string(roundup_power2_divisions[k]);
    add("roundup_power2_divisions:[" + list + "]");
  }
  return out;
}

std::optional<AllocConf> parse_alloc_conf(std::string_view text, std::string& error) {
  return Parser(lex(text), error).parse();
}

}  // namespace memtrace::torch_model
