// Process-level helpers shared by the daemons and `spar cluster`: port
// files (so a supervisor or test can start a daemon on port 0 and learn the
// port), shutdown signals, and gRPC channel/server settings.
#ifndef SPAR_SERVICES_COMMON_DAEMON_H_
#define SPAR_SERVICES_COMMON_DAEMON_H_

#include <functional>
#include <memory>
#include <string>

#include <grpcpp/channel.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace spar {

// Writes "<port>\n" to `path` atomically (temporary file, then rename), so a
// reader never sees a partial file.
absl::Status WritePortFile(const std::string& path, int port);

// Blocks SIGINT and SIGTERM in the calling thread. Call first in main(),
// before any thread starts, so every thread inherits the mask and the
// signals are only ever taken by WaitForShutdownSignal.
void BlockShutdownSignals();

// Waits for SIGINT or SIGTERM (blocked beforehand). Returns the signal, or 0
// when `timeout` passes first.
int WaitForShutdownSignal(absl::Duration timeout = absl::InfiniteDuration());

// The drain after a shutdown signal: polls `idle` until it is true (returns
// true), `timeout` passes, or a second SIGINT/SIGTERM asks to stop at once
// (returns false for both).
bool WaitForDrain(const std::function<bool()>& idle, absl::Duration timeout);

// Message-size limits. Hidden states of a long prefill chunk exceed gRPC's
// 4 MiB default (GLM-5: 8192 tokens x 6144 x bf16 = 96 MiB), so the worker
// plane is unlimited; the public API bounds requests.
inline constexpr int kPublicMaxMessageBytes = 64 << 20;

// Channel to a worker (internal plane): unlimited messages, keepalive so a
// dead peer is noticed on idle streams; TLS and the worker token as the
// process's worker plane says (services/security/worker_plane.h).
std::shared_ptr<grpc::Channel> CreateWorkerChannel(const std::string& address);
// Channel to the public API.
std::shared_ptr<grpc::Channel> CreatePublicChannel(const std::string& address);

// Applies the limits above to a server of the given plane.
void ConfigureWorkerServer(grpc::ServerBuilder* builder);
void ConfigurePublicServer(grpc::ServerBuilder* builder);

// "host:port" for a listening address.
std::string HostPort(const std::string& host, int port);

// The model name clients send when --served-model-name is not given: the
// model directory's last component ("models/tiny-glm5-chat/bf16" -> "bf16").
std::string DefaultServedModelName(const std::string& model_dir);

}  // namespace spar

#endif  // SPAR_SERVICES_COMMON_DAEMON_H_
