// `spar-worker` / `spar worker`: flags (and SPAR_* environment variables),
// wiring and the server's lifetime. Returns a process exit code.
#ifndef SPAR_SERVICES_WORKER_WORKER_MAIN_H_
#define SPAR_SERVICES_WORKER_WORKER_MAIN_H_

namespace spar {

// Parses argv[begin..argc) and serves until SIGINT/SIGTERM.
int RunWorkerMain(int argc, char** argv, int begin);

}  // namespace spar

#endif  // SPAR_SERVICES_WORKER_WORKER_MAIN_H_
