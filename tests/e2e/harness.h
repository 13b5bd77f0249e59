// What the end-to-end tests share: running commands, reading ledgers and sample accounts.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace e2e {

struct Result {
  int status = -1;  // exit code, or 128+signal
  std::string out;
  std::string err;
};

// Built with a sanitizer (scripts/sanitize): the tests, memtrace and the injector are instrumented.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
// ENV, and under scripts/sanitize the sanitizer's runtime preloaded ("LD_PRELOAD=..."), which a
// program that loads the instrumented injector itself (memtrace.record, attach) needs first.
std::vector<std::string> with_sanitizer_runtime(std::vector<std::string> env = {});
// Why the bundle and the wheel are not tested in a sanitizer's build: what ships is made from a
// normal build, and an instrumented one's binaries need their runtime loaded first in every
// program they enter (attach, memtrace.record, the pytest plugin), which only tests can arrange.
constexpr const char* kNotShippedWhenSanitized =
    "the bundle and the wheel are made from a normal build (its tests run them): this build is instrumented";

// Runs ARGV with the extra environment ENV ("NAME=value"), capturing its output.
Result run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});

// `memtrace run --sim -o DIR/traces [OPTIONS...] -- COMMAND...`, with a ledger per process in DIR
// and the extra environment ENV.
Result run_traced(const std::string& dir, const std::vector<std::string>& command,
                  const std::vector<std::string>& memtrace_options = {}, const std::vector<std::string>& env = {});
// The same for one of the C++ samples.
Result run_sample(const std::string& dir, const std::string& sample, const std::vector<std::string>& args = {},
                  const std::vector<std::string>& memtrace_options = {}, const std::vector<std::string>& env = {});
// Every CPython 3 on this machine: Debian's /usr/bin/python3 and each pyenv version (and the
// one the build found), with its minor version.
struct Python {
  std::string path;
  int minor = 0;
};
// How a test's parameter reads in its name's listing: the interpreter.
inline void PrintTo(const Python& python, std::ostream* out) { *out << python.path; }
const std::vector<Python>& pythons();
// Those memtrace reads frames of (3.9 and later).
std::vector<Python> readable_pythons();

// The command that runs a Python sample.
std::vector<std::string> python_sample(const std::string& script, const std::vector<std::string>& args = {});
std::string python_sample_path(const std::string& script);

// The line of SOURCE marked `memtrace-test: MARK`; fails the test when there is none.
uint32_t marked_line(const std::string& source, const std::string& mark);

// Every line of `memtrace export --format jsonl` for the traces in DIR/traces.
std::vector<nlohmann::json> exported_events(const std::string& dir);
// Whether an exported event is memtrace's sample of the device layer (device.used, what pools,
// graphs and other processes hold), not a call the program made.
inline bool is_device_sample(const nlohmann::json& e) { return e.value("layer", "") == "device"; }

struct LedgerApi {
  uint64_t calls = 0, failed = 0, bytes = 0;
};
struct Ledger {
  std::map<std::string, LedgerApi> apis;
  std::map<int, uint64_t> live, peak;
};
// The ledgers the simulated device wrote in DIR, by pid.
std::map<int, Ledger> read_ledgers(const std::string& dir);

// What every traced run must satisfy: per process, the report's calls, failures and bytes per
// API are the ledger's; its live bytes at exit too; its peaks (where EXACT_PEAKS) the ledger's
// and the sample's own. RECORDED_AS names the API an event is recorded under for a call the
// ledger counts under another (a static runtime's cudaMalloc is seen as its cuMemAlloc); the
// ledger's counts are summed by that name.
void expect_report_matches_ledger(const std::string& dir, const Result& r, bool exact_peaks,
                                  std::string (*recorded_as)(const std::string& api) = nullptr);

// The `memtrace-sample:` lines a run printed, by pid.
std::map<int, nlohmann::json> sample_accounts(const std::string& out);

nlohmann::json report_json(const std::string& path);
// What a memtrace command printed with --json in ARGV; fails the test unless it exits 0 with JSON.
nlohmann::json command_json(const std::vector<std::string>& argv);

// The text of the file at PATH (empty when there is none).
std::string read_file(const std::string& path);
// Waits until FILE holds TEXT, or PID (when given) ended first; false then. The two minutes are
// only there so that a broken build fails instead of hanging.
bool wait_for_text(const std::string& file, const std::string& text, int pid = 0);

// A program started in the background (ARGV, with the extra environment ENV), its stdout and
// stderr in DIR/NAME.out and DIR/NAME.err. A test that stopped early (a failed assertion) leaves
// no program running behind it.
struct Background {
  int pid = -1;
  std::string out, err;
  Background(const std::string& dir, const std::string& name, const std::vector<std::string>& argv,
             const std::vector<std::string>& env = {});
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  // Its exit code, or 128+signal.
  int wait();
  std::string output() const { return read_file(out); }
  std::string errors() const { return read_file(err); }
};

// A fresh folder under the test's temporary directory.
std::string temp_dir(const std::string& name);

std::string sample_path(const std::string& name);
extern const std::string kMemtrace;

}  // namespace e2e
