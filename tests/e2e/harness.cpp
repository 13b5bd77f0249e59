#include "harness.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "memtrace/format/api.h"

extern char** environ;

namespace e2e {

namespace fs = std::filesystem;

const std::string kMemtrace = MEMTRACE_BIN;

std::string sample_path(const std::string& name) { return std::string(MEMTRACE_SAMPLES_DIR) + "/" + name; }

namespace {

// This test process's folder, under which temp_dir() makes each test's.
fs::path process_folder() { return fs::temp_directory_path() / ("memtrace-e2e-" + std::to_string(::getpid())); }

// The folders go with the process when every test in it passed (a failure's stay, to be looked
// at): a run of the whole suite leaves nothing in the temporary folder.
class TempFolders : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ignored;  // a program a test started may still be writing there
    if (::testing::UnitTest::GetInstance()->Passed()) fs::remove_all(process_folder(), ignored);
  }
};
[[maybe_unused]] ::testing::Environment* const kTempFolders = ::testing::AddGlobalTestEnvironment(new TempFolders);

}  // namespace

std::string temp_dir(const std::string& name) {
  // Outside a test (a suite's set-up), the suite's name stands for it.
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const auto* suite = ::testing::UnitTest::GetInstance()->current_test_suite();
  std::string owner =
      info ? std::string(info->test_suite_name()) + "." + info->name() : std::string(suite ? suite->name() : "suite");
  fs::path dir = process_folder() / (owner + "." + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

namespace {
std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

std::string read_file(const std::string& path) { return slurp(path); }

bool wait_for_text(const std::string& file, const std::string& text, int pid) {
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
       std::chrono::steady_clock::now() < deadline;) {
    if (slurp(file).find(text) != std::string::npos) return true;
    if (pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == pid) return slurp(file).find(text) != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

Background::Background(const std::string& dir, const std::string& name, const std::vector<std::string>& argv,
                       const std::vector<std::string>& env) {
  out = dir + "/" + name + ".out";
  err = dir + "/" + name + ".err";
  pid = ::fork();
  if (pid == 0) {
    if (!freopen(out.c_str(), "w", stdout) || !freopen(err.c_str(), "w", stderr)) _exit(126);
    for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    _exit(127);
  }
}

Background::~Background() {
  if (pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
}

int Background::wait() {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  pid = -1;  // waited for: nothing for the destructor to do
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<std::string> with_sanitizer_runtime(std::vector<std::string> env) {
  if (const char* first = std::getenv("MEMTRACE_PRELOAD_FIRST"); first && *first)
    env.push_back(std::string("LD_PRELOAD=") + first);
  return env;
}

Result run(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::string base = fs::temp_directory_path() / ("memtrace-e2e-out-" + std::to_string(::getpid()));
  std::string out_path = base + ".out", err_path = base + ".err";
  pid_t pid = ::fork();
  if (pid == 0) {
    if (!freopen(out_path.c_str(), "w", stdout) || !freopen(err_path.c_str(), "w", stderr)) _exit(126);
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  Result r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  fs::remove(out_path);
  fs::remove(err_path);
  return r;
}

Result run_traced(const std::string& dir, const std::vector<std::string>& command,
                  const std::vector<std::string>& memtrace_options, const std::vector<std::string>& env) {
  std::vector<std::string> argv{kMemtrace, "run", "--sim", "-o", dir + "/traces"};
  argv.insert(argv.end(), memtrace_options.begin(), memtrace_options.end());
  argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  std::vector<std::string> all_env{"MEMTRACE_SIM_LEDGER=" + dir + "/ledger-%p.txt"};
  all_env.insert(all_env.end(), env.begin(), env.end());
  return run(argv, all_env);
}

Result run_sample(const std::string& dir, const std::string& sample, const std::vector<std::string>& args,
                  const std::vector<std::string>& memtrace_options, const std::vector<std::string>& env) {
  std::vector<std::string> command{sample_path(sample)};
  command.insert(command.end(), args.begin(), args.end());
  return run_traced(dir, command, memtrace_options, env);
}

std::string python_sample_path(const std::string& script) {
  return std::string(MEMTRACE_PYTHON_SAMPLES) + "/" + script;
}

const std::vector<Python>& pythons() {
  static const std::vector<Python> found = [] {
    std::vector<std::string> paths;
    std::string build_python = MEMTRACE_PYTHON;
    if (build_python.find("/shims/") == std::string::npos) paths.push_back(build_python);  // a pyenv shim: below
    paths.push_back("/usr/bin/python3");
    std::error_code ec;
    fs::path pyenv = fs::path(std::getenv("HOME") ? std::getenv("HOME") : "/root") / ".pyenv/versions";
    for (const auto& entry : fs::directory_iterator(pyenv, ec))
      paths.push_back((entry.path() / "bin/python3").string());
    std::vector<Python> out;
    for (const std::string& path : paths) {
      if (!fs::exists(path) ||
          std::any_of(out.begin(), out.end(), [&](const Python& p) { return fs::equivalent(p.path, path, ec); }))
        continue;
      Result r = run({path, "-c", "import sys; print(sys.version_info[0] * 100 + sys.version_info[1])"});
      int version = r.status == 0 ? std::atoi(r.out.c_str()) : 0;
      if (version / 100 == 3) out.push_back(Python{path, version % 100});
    }
    std::sort(out.begin(), out.end(), [](const Python& a, const Python& b) { return a.minor < b.minor; });
    return out;
  }();
  return found;
}

std::vector<Python> readable_pythons() {
  std::vector<Python> out;
  for (const Python& p : pythons())
    if (p.minor >= 9) out.push_back(p);
  return out;
}

std::vector<std::string> python_sample(const std::string& script, const std::vector<std::string>& args) {
  std::vector<std::string> command{MEMTRACE_PYTHON, python_sample_path(script)};
  command.insert(command.end(), args.begin(), args.end());
  return command;
}

uint32_t marked_line(const std::string& source, const std::string& mark) {
  std::ifstream in(source);
  std::string line;
  for (uint32_t number = 1; std::getline(in, line); ++number) {
    size_t at = line.find("memtrace-test: " + mark);
    if (at != std::string::npos && line.size() == at + 15 + mark.size()) return number;
  }
  ADD_FAILURE() << "no line marked 'memtrace-test: " << mark << "' in " << source;
  return 0;
}

std::vector<nlohmann::json> exported_events(const std::string& dir) {
  Result r = run({kMemtrace, "export", "--format", "jsonl", dir + "/traces"});
  EXPECT_EQ(r.status, 0) << r.err;
  std::vector<nlohmann::json> events;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) events.push_back(nlohmann::json::parse(line));
  return events;
}

std::map<int, Ledger> read_ledgers(const std::string& dir) {
  std::map<int, Ledger> ledgers;
  static const std::regex name("ledger-([0-9]+)\\.txt");
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::smatch m;
    std::string file = entry.path().filename().string();
    if (!std::regex_match(file, m, name)) continue;
    Ledger& l = ledgers[std::stoi(m[1])];
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      std::string kind, key, label;
      words >> kind;
      if (kind == "api") {
        LedgerApi a;
        words >> key >> label >> a.calls >> label >> a.failed >> label >> a.bytes;
        l.apis[key] = a;
      } else if (kind == "device") {
        int device;
        uint64_t live, peak;
        words >> device >> label >> live >> label >> peak;
        l.live[device] = live;
        l.peak[device] = peak;
      }
    }
  }
  return ledgers;
}

std::map<int, nlohmann::json> sample_accounts(const std::string& out) {
  std::map<int, nlohmann::json> accounts;
  std::istringstream in(out);
  std::string line;
  const std::string prefix = "memtrace-sample: ";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    nlohmann::json j = nlohmann::json::parse(line.substr(prefix.size()));
    accounts[j["pid"].get<int>()] = j;
  }
  return accounts;
}

nlohmann::json report_json(const std::string& path) { return command_json({kMemtrace, "report", "--json", path}); }

nlohmann::json command_json(const std::vector<std::string>& argv) {
  Result r = run(argv);
  EXPECT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j;
}

namespace {
const nlohmann::json* find_process(const nlohmann::json& report, int pid) {
  for (const nlohmann::json& p : report["processes"])
    if (p["pid"] == pid) return &p;
  return nullptr;
}
}  // namespace

void expect_report_matches_ledger(const std::string& dir, const Result& r, bool exact_peaks,
                                  std::string (*recorded_as)(const std::string& api)) {
  using nlohmann::json;
  std::map<int, Ledger> ledgers = read_ledgers(dir);
  std::map<int, json> accounts = sample_accounts(r.out);
  ASSERT_FALSE(ledgers.empty()) << "the simulated device wrote no ledger";
  json report = report_json(dir + "/traces");
  ASSERT_EQ(report["processes"].size(), ledgers.size()) << report.dump(2);

  for (const auto& [pid, ledger] : ledgers) {
    SCOPED_TRACE("pid " + std::to_string(pid));
    const json* p = find_process(report, pid);
    ASSERT_NE(p, nullptr) << "no trace for process " << pid;
    EXPECT_TRUE((*p)["complete"].get<bool>()) << (*p)["problem"];
    EXPECT_EQ((*p)["dropped_events"], 0);

    // Calls and failures per API: exactly the ledger's, no API more, none less.
    std::map<std::string, LedgerApi> expected;
    for (const auto& [api, counts] : ledger.apis) {
      LedgerApi& e = expected[recorded_as ? recorded_as(api) : api];
      e.calls += counts.calls;
      e.failed += counts.failed;
      e.bytes += counts.bytes;
    }
    // The device's ledger holds its own calls: a program's marks and ranges (NVTX) are not, and are
    // held against the program's account below.
    const json& events = (*p)["events"];
    size_t device_calls = 0;
    for (const auto& [api, counts] : events.items()) {
      auto known = memtrace::api_from_name(api);
      device_calls += known && memtrace::api_info(*known).op == memtrace::Op::kMark ? 0 : 1;
    }
    EXPECT_EQ(device_calls, expected.size()) << events.dump();
    for (const auto& [api, counts] : expected) {
      ASSERT_TRUE(events.contains(api)) << api << " missing from " << events.dump();
      EXPECT_EQ(events[api]["calls"].get<uint64_t>(), counts.calls) << api;
      EXPECT_EQ(events[api]["failed"].get<uint64_t>(), counts.failed) << api;
      EXPECT_EQ(events[api]["bytes"].get<uint64_t>(), counts.bytes) << api;
    }

    // Device memory: live at exit always, peaks where they are well defined.
    std::map<int, const json*> devices;
    for (const json& d : (*p)["devices"]) devices[d["device"].get<int>()] = &d;
    for (const auto& [device, peak] : ledger.peak) {
      if (peak == 0) continue;
      ASSERT_TRUE(devices.count(device)) << "device " << device << " missing";
      const json& d = *devices[device];
      EXPECT_EQ(d["live_at_exit_bytes"].get<uint64_t>(), ledger.live.at(device)) << "device " << device;
      if (!exact_peaks) continue;
      EXPECT_EQ(d["peak_reserved_bytes"].get<uint64_t>(), peak) << "device " << device;
      if (accounts.count(pid)) {
        EXPECT_EQ(d["peak_reserved_bytes"].get<uint64_t>(),
                  accounts[pid]["peak_bytes"][std::to_string(device)].get<uint64_t>())
            << "device " << device;
      }
    }
    // Every sample's own account of its calls agrees too.
    if (accounts.count(pid)) {
      std::map<std::string, uint64_t> account_calls;
      for (const auto& [api, calls] : accounts[pid]["calls"].items())
        account_calls[recorded_as ? recorded_as(api) : api] += calls.get<uint64_t>();
      for (const auto& [api, calls] : account_calls) EXPECT_EQ(events[api]["calls"], calls) << api;
    }
  }
}

}  // namespace e2e
