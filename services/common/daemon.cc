#include "services/common/daemon.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "absl/strings/str_cat.h"
#include "services/security/worker_plane.h"

namespace spar {

absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot write port file ", tmp, ": ", std::strerror(errno)));
  }
  std::fprintf(f, "%d\n", port);
  if (std::fclose(f) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot write port file ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

namespace {
sigset_t ShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}
}  // namespace

void BlockShutdownSignals() {
  sigset_t set = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForShutdownSignal(absl::Duration timeout) {
  sigset_t set = ShutdownSignals();
  if (timeout == absl::InfiniteDuration()) {
    int sig = 0;
    while (sigwait(&set, &sig) != 0) {
    }
    return sig;
  }
  const timespec ts = absl::ToTimespec(timeout);
  for (;;) {
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig > 0) return sig;
    if (errno == EAGAIN) return 0;
    // EINTR: another signal; wait again (a slightly longer total is fine).
  }
}

bool WaitForDrain(const std::function<bool()>& idle, absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  for (;;) {
    if (idle()) return true;
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    if (WaitForShutdownSignal(std::min(left, absl::Milliseconds(20))) != 0) return false;
  }
}

namespace {
grpc::ChannelArguments BaseArgs() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Reconnect quickly after a peer restarts (default backoff grows to 120 s).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  return args;
}
}  // namespace

std::shared_ptr<grpc::Channel> CreateWorkerChannel(const std::string& address) {
  grpc::ChannelArguments args = BaseArgs();
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  const WorkerPlane& plane = ProcessWorkerPlane();
  plane.AddChannelArguments(&args);
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, plane.ChannelCredentials(), args,
                                                                 plane.Interceptors());
}

std::shared_ptr<grpc::Channel> CreatePublicChannel(const std::string& address) {
  grpc::ChannelArguments args = BaseArgs();
  args.SetMaxReceiveMessageSize(kPublicMaxMessageBytes);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

void ConfigureWorkerServer(grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(-1);
  builder->SetMaxSendMessageSize(-1);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
}

void ConfigurePublicServer(grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(kPublicMaxMessageBytes);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
}

std::string HostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos && host.front() != '[') return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

std::string DefaultServedModelName(const std::string& model_dir) {
  std::string dir = model_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir.substr(dir.rfind('/') + 1);
}

}  // namespace spar
