// The simulated device's ledger: the independent truth tests compare traces with. The device
// counts, per API the program called, calls, failed calls and bytes, and per device the bytes of
// device memory live and at peak. With MEMTRACE_SIM_LEDGER=FILE (`%p` in FILE becomes the pid)
// it keeps FILE current after every call, so a program killed mid-run leaves a true ledger.
//
// FILE holds fixed-width lines, whitespace-separated:
//   api <name> calls <n> failed <n> bytes <n>
//   device <ordinal> live <n> peak <n>
#pragma once

#include <cstdint>

#include "export_tables.h"

extern "C" {
// Marks the start of a public API call on this thread. Returns 1 for the outermost call, which
// is the one the ledger counts (the runtime serving cudaMalloc through cuMemAlloc is one call).
int memtrace_sim_enter(void);
void memtrace_sim_leave(int outermost, const char* api, int result, uint64_t bytes, int counted);
// Size of the allocation that starts at ADDR, 0 if none: the runtime's frees count their bytes.
uint64_t memtrace_sim_allocation_size(uint64_t addr);
}

namespace sim {

// One public API call, counted in the ledger under NAME when it is the outermost. In the runtime it
// reaches the driver's ledger through the driver's table (export_tables.h).
class ApiCall {
 public:
  explicit ApiCall(const char* name) : name_(name), outermost_(hooks().enter()) {}
  ~ApiCall() {
    if (!left_) hooks().leave(outermost_, name_, 0, 0, 0);
  }
  ApiCall(const ApiCall&) = delete;
  ApiCall& operator=(const ApiCall&) = delete;

  template <typename Result>
  Result done(Result result, uint64_t bytes = 0) {
    hooks().leave(outermost_, name_, static_cast<int>(result), result == Result(0) ? bytes : 0, 1);
    left_ = true;
    return result;
  }

 private:
  const char* name_;
  int outermost_;
  bool left_ = false;
};

}  // namespace sim
