#include "services/common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace spar {

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(const std::vector<std::string>& argv,
                                                                  const SpawnOptions& options) {
  if (argv.empty()) return absl::InvalidArgumentError("spawn: empty argv");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int log_fd = -1;
  if (!options.log_path.empty()) {
    log_fd = ::open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return absl::UnavailableError(absl::StrCat("cannot open ", options.log_path, ": ", std::strerror(errno)));
    }
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    if (log_fd >= 0) ::close(log_fd);
    return absl::UnavailableError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
    // The parent may block SIGINT/SIGTERM for sigwait; the child must not.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (log_fd >= 0) {
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
    }
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  std::string name = argv[0];
  if (auto slash = name.rfind('/'); slash != std::string::npos) name = name.substr(slash + 1);
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, name));
}

ChildProcess::~ChildProcess() { Stop(); }

bool ChildProcess::Running() {
  if (exited_) return false;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_ || (r < 0 && errno == ECHILD)) {
    exited_ = true;
    wait_status_ = status;
    return false;
  }
  return true;
}

std::string ChildProcess::ExitDescription() const {
  if (!exited_) return "running";
  if (WIFEXITED(wait_status_)) return absl::StrCat("exited with status ", WEXITSTATUS(wait_status_));
  if (WIFSIGNALED(wait_status_)) return absl::StrCat("killed by signal ", WTERMSIG(wait_status_));
  return "ended";
}

void ChildProcess::Signal(int signal) {
  if (!exited_) ::kill(pid_, signal);
}

void ChildProcess::Stop(absl::Duration grace) {
  if (!Running()) return;
  ::kill(pid_, SIGTERM);
  const absl::Time until = absl::Now() + grace;
  while (absl::Now() < until) {
    if (!Running()) return;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  exited_ = true;
  wait_status_ = status;
}

absl::StatusOr<int> WaitForPortFile(const std::string& path, absl::Duration timeout, ChildProcess* child) {
  const absl::Time until = absl::Now() + timeout;
  for (;;) {
    std::ifstream in(path);
    std::string line;
    int port = 0;
    if (in && std::getline(in, line) && absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &port) && port > 0) {
      return port;
    }
    if (child != nullptr && !child->Running()) {
      return absl::UnavailableError(
          absl::StrCat(child->name(), " ", child->ExitDescription(), " before writing its port file ", path));
    }
    if (absl::Now() >= until) {
      return absl::DeadlineExceededError(absl::StrCat("no port in ", path, " after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

std::string SelfExePath() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, n);
}

std::string SelfExeDir() {
  std::string path = SelfExePath();
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace spar
