// memtrace.record: the injector loaded into a running Python program by the memtrace package
// (injector/python/memtrace), with dlopen, after CUDA may have started. Its interposers are never
// reached then (the program bound its CUDA functions long before), so CUPTI's callbacks record, as
// under `memtrace run --backend cupti`; the package sets the same MEMTRACE_* variables first and
// starts the collector (`memtrace _record`) itself.
#include <cstdio>
#include <cstring>
#include <string>

#include "backend.h"
#include "interpose.h"
#include "session.h"

using namespace memtrace::inject;

namespace {

void say(char* why, size_t size, const std::string& text) {
  if (why && size) std::snprintf(why, size, "%s", text.c_str());
}

}  // namespace

// Starts recording: connects to the collector and subscribes to CUPTI. What was allocated before
// cannot be seen; the device layer now is sampled, and the trace says so. 0 when recording; -1
// with WHY (a sentence) when not, and nothing left running.
MEMTRACE_EXPORT int memtrace_record_start(char* why, size_t why_size) {
  if (backend() != Backend::kCupti) {
    say(why, why_size, "MEMTRACE_BACKEND must be cupti before the injector is loaded");
    return -1;
  }
  if (!session_active()) {
    say(why, why_size, "memtrace's collector could not be reached (or this process recorded already)");
    return -1;
  }
  std::string why_not;
  if (!cupti_subscribed(why_not)) {
    end_session();
    say(why, why_size, "CUPTI's callbacks could not be turned on: " + why_not);
    return -1;
  }
  const uint64_t caller = MEMTRACE_CALLER;
  describe_devices_once(caller);
  const int device = driver_device(caller);
  publish_notice(
      "recorded from inside the program (memtrace.record): what it allocated before recording started is not in "
      "this trace; the device layer at the start is" +
      std::string(device >= 0 ? " sampled then" : " unknown (no CUDA context yet)"));
  if (device >= 0) sample_device_memory(caller, device, UINT64_MAX);  // the device layer at the start
  return 0;
}

// Stops recording for good in this process: CUPTI is let go of and the collector finishes the trace.
MEMTRACE_EXPORT void memtrace_record_stop() {
  stop_cupti();
  end_session();
}
