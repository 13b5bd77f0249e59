// Each sample keeps its own account of what it did: calls and failed calls per API, and device
// memory live and at peak per device. It prints the account as one line at exit,
//   memtrace-sample: {"pid":..,"calls":{..},"failed":{..},"peak_bytes":{"0":..},"live_at_exit_bytes":{..}}
// so tests can hold memtrace's report against what the program knows of itself.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace sample {

class Account {
 public:
  // A call of API; OK says whether it succeeded.
  void call(const std::string& api, bool ok) {
    ++calls_[api];
    if (!ok) ++failed_[api];
  }
  // Device memory (device, managed, VMM physical) that became live or went away on DEVICE.
  void live(int device, int64_t delta) {
    int64_t& now = live_[device];
    now += delta;
    if (now > peak_[device]) peak_[device] = now;
  }
  int64_t peak(int device) { return peak_[device]; }

  void print() const {
    std::string out = "memtrace-sample: {\"pid\":" + std::to_string(::getpid());
    out += ",\"calls\":" + json(calls_) + ",\"failed\":" + json(failed_);
    out += ",\"peak_bytes\":" + json(peak_) + ",\"live_at_exit_bytes\":" + json(live_) + "}\n";
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
  }

 private:
  template <typename K, typename V>
  static std::string json(const std::map<K, V>& m) {
    std::string s = "{";
    for (const auto& [k, v] : m) {
      if (s.size() > 1) s += ",";
      if constexpr (std::is_same_v<K, std::string>)
        s += "\"" + k + "\":";
      else
        s += "\"" + std::to_string(k) + "\":";
      s += std::to_string(v);
    }
    return s + "}";
  }
  std::map<std::string, int64_t> calls_, failed_;
  std::map<int, int64_t> live_, peak_;
};

// An account that threads share: each note is one locked update of device 0.
class SharedAccount {
 public:
  void note(const char* api, bool ok, int64_t bytes) {
    std::lock_guard lock(mutex_);
    account_.call(api, ok);
    account_.live(0, bytes);
  }
  void print() {
    std::lock_guard lock(mutex_);
    account_.print();
  }

 private:
  std::mutex mutex_;
  Account account_;
};

// Stops the sample with a message when a call that must work fails.
#define SAMPLE_CHECK(expr)                                                                                  \
  do {                                                                                                      \
    long long sample_check_result = static_cast<long long>(expr);                                           \
    if (sample_check_result != 0) {                                                                         \
      std::fprintf(stderr, "%s:%d: %s failed with %lld\n", __FILE__, __LINE__, #expr, sample_check_result); \
      std::exit(2);                                                                                         \
    }                                                                                                       \
  } while (0)

inline long arg_value(int argc, char** argv, const char* name, long fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == name) return std::strtol(argv[i + 1], nullptr, 10);
  return fallback;
}

}  // namespace sample
