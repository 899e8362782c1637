// spar workers --workers HOST:PORT,... [--reset]
// Prints each worker's shard, pipeline epoch and statistics (busy time,
// micro-batches, activation bytes): a quick look at a running pipeline.
#include <grpcpp/client_context.h>

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "services/cli/commands.h"
#include "services/common/args.h"
#include "services/common/daemon.h"
#include "spar/v1/worker.grpc.pb.h"

namespace spar {

int RunWorkers(int argc, char** argv) {
  std::string workers;
  bool reset = false;
  ArgParser args("workers");
  args.AddString("workers", &workers, "worker addresses, host:port,host:port,...");
  args.AddBool("reset", &reset, "start a new statistics window after reading");
  if (auto s = args.Parse(argc, argv, 2); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  if (args.help_requested() || workers.empty()) {
    std::cout << args.Usage();
    return workers.empty() && !args.help_requested() ? 2 : 0;
  }
  int code = 0;
  for (const std::string& address : std::vector<std::string>(absl::StrSplit(workers, ',', absl::SkipEmpty()))) {
    auto stub = v1::Worker::NewStub(CreateWorkerChannel(address));
    grpc::ClientContext ictx, sctx;
    ictx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    sctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    v1::WorkerInfo info;
    v1::GetStatsRequest sreq;
    sreq.set_reset(reset);
    v1::WorkerStats stats;
    grpc::Status si = stub->GetInfo(&ictx, v1::GetInfoRequest(), &info);
    grpc::Status ss = si.ok() ? stub->GetStats(&sctx, sreq, &stats) : si;
    if (!ss.ok()) {
      std::cout << address << ": " << ss.error_message() << "\n";
      code = 1;
      continue;
    }
    const double window = stats.window_ns() * 1e-9;
    std::cout << absl::StrFormat(
        "%s: layers [%d, %d) of %d, %s, %d KV blocks (%s), stage %d of %d, epoch %d, next %s\n"
        "  %d micro-batches, %d tokens, busy %.1f%% of %.1f s, queue %d, %d sampling states, %d B in, %d B out\n",
        address, info.shard().first_layer(), info.shard().last_layer(), info.num_model_layers(),
        info.loaded() ? "loaded" : "not loaded", info.shard().num_blocks(),
        info.shard().kv_cache_dtype().empty()
            ? std::string("formats not known yet")
            : absl::StrCat("latent ", info.shard().kv_cache_dtype(), ", indexer ", info.shard().indexer_cache_dtype()),
        info.stage_index(), info.num_stages(),
        info.epoch(), info.next_stage_address().empty() ? "-" : info.next_stage_address(), stats.micro_batches(),
        stats.tokens(), window > 0 ? 100.0 * stats.busy_ns() * 1e-9 / window : 0.0, window, stats.queue_depth(),
        stats.sampling_states(), stats.activation_bytes_in(), stats.activation_bytes_out());
  }
  return code;
}

}  // namespace spar
