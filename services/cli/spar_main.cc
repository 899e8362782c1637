// `spar`: the command-line front end. Subcommands live in their own files.
#include <cstring>
#include <iostream>
#include <string>

#include "services/cli/commands.h"
#include "services/scheduler/scheduler_main.h"
#include "services/worker/worker_main.h"

namespace {

constexpr char kUsage[] =
    "usage: spar <command> [flags]\n"
    "commands:\n"
    "  generate    stream a completion: in-process (--model) or from a scheduler (--server)\n"
    "  cluster     start a local cluster: a scheduler and --stages workers on this machine\n"
    "  scheduler   run the spar-scheduler daemon (same as the spar-scheduler binary)\n"
    "  worker      run the spar-worker daemon (same as the spar-worker binary)\n"
    "  workers     show running workers' shards, epochs and statistics\n"
    "  plan        whether a model fits a set of GPUs, and the KV cache tokens it leaves\n"
    "  make-tiny   write a deterministic random-weight GLM-5 / DeepSeek-V3.2 checkpoint\n"
    "run `spar <command> --help` for its flags\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "make-tiny") return spar::RunMakeTiny(argc, argv);
  if (command == "generate") return spar::RunGenerate(argc, argv);
  if (command == "cluster") return spar::RunCluster(argc, argv);
  if (command == "scheduler") return spar::RunSchedulerMain(argc, argv, 2);
  if (command == "worker") return spar::RunWorkerMain(argc, argv, 2);
  if (command == "workers") return spar::RunWorkers(argc, argv);
  if (command == "plan") return spar::RunPlan(argc, argv);
  std::cerr << "spar: unknown command \"" << command << "\"\n" << kUsage;
  return 2;
}
