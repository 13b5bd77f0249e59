#include "launcher.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace memtrace {

void set_env(std::vector<std::string>& environment, const std::string& name, const std::string& value, bool prepend) {
  const std::string key = name + "=";
  for (std::string& entry : environment) {
    if (entry.compare(0, key.size(), key) != 0) continue;
    std::string old = entry.substr(key.size());
    entry = key + (prepend && !old.empty() ? value + ":" + old : value);
    return;
  }
  environment.push_back(key + value);
}

pid_t launch(const std::vector<std::string>& argv, const std::vector<std::string>& environment, std::string& error,
             int& exit_code) {
  std::vector<char*> args, env;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : environment) env.push_back(const_cast<char*>(e.c_str()));
  env.push_back(nullptr);

  // The child reports a failed exec through this pipe; a successful exec closes it.
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    error = std::string("cannot start ") + argv[0] + ": " + std::strerror(errno);
    exit_code = kExitMemtraceFailed;
    return -1;
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(report[0]);
    ::execvpe(args[0], args.data(), env.data());
    int err = errno;
    (void)!::write(report[1], &err, sizeof err);
    ::_exit(kExitNotFound);
  }
  ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    error = std::string("cannot start ") + argv[0] + ": " + std::strerror(errno);
    exit_code = kExitMemtraceFailed;
    return -1;
  }
  int err = 0;
  ssize_t n;
  do n = ::read(report[0], &err, sizeof err);
  while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == sizeof err) {
    ::waitpid(pid, nullptr, 0);
    exit_code = err == ENOENT ? kExitNotFound : kExitCannotExecute;
    error = "cannot run '" + argv[0] + "': " + (err == ENOENT ? "command not found" : std::strerror(err));
    return -1;
  }
  return pid;
}

}  // namespace memtrace
