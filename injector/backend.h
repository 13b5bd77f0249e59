// Which of the injector's two layers records (memtrace run --backend): its interposers (preload),
// CUPTI's callbacks for the allocation calls (cupti, cupti_backend.cpp), or both (auto), where an
// interposer records the calls it sees and CUPTI the ones no interposer saw (a static runtime's,
// a library's that fetched its functions some other way). Either way a call is recorded once:
// whichever layer sees it first (outermost) records it, and the other passes it through.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace memtrace::inject {

enum class Backend { kPreload, kCupti, kAuto };
Backend backend();

// Whether the interposers record: not while CUPTI alone records (--backend cupti), again once it
// cannot (another tool holds CUPTI, or takes it over).
extern std::atomic<bool> g_interposers_record;

// Depth of CUPTI callbacks (entered, not yet exited) on this thread, valid while its generation is
// the current one: CUPTI handed over to another tool mid-call never sends the exits.
extern thread_local int t_cupti_depth __attribute__((tls_model("initial-exec")));
extern thread_local uint32_t t_cupti_generation __attribute__((tls_model("initial-exec")));
extern std::atomic<uint32_t> g_cupti_generation;

// An interposer is recording the call this thread is in: CUPTI's callbacks for it (and for what
// the runtime calls inside it) are not recorded again.
extern thread_local bool t_interposer_recording __attribute__((tls_model("initial-exec")));

// Inside a CUDA call CUPTI reported: an interposer reached from it (a static runtime calling
// through memtrace's wrappers) must not record it again.
inline bool in_cupti_call() {
  return t_cupti_depth > 0 && t_cupti_generation == g_cupti_generation.load(std::memory_order_relaxed);
}

// Subscribes to CUPTI's allocation callbacks unless --backend preload (once; called when the
// driver initializes, through InitializeInjection, and when the session starts).
void start_cupti();

// memtrace.record (record.cpp), where CUPTI is the only way in: whether its callbacks are on, and
// when not, why (WHY_NOT).
bool cupti_subscribed(std::string& why_not);
// memtrace.stop: lets go of CUPTI; its callbacks end.
void stop_cupti();

}  // namespace memtrace::inject
