// `spar-scheduler` / `spar scheduler`: flags (and SPAR_* environment
// variables), wiring and the server's lifetime. Returns a process exit code.
#ifndef SPAR_SERVICES_SCHEDULER_SCHEDULER_MAIN_H_
#define SPAR_SERVICES_SCHEDULER_SCHEDULER_MAIN_H_

namespace spar {

int RunSchedulerMain(int argc, char** argv, int begin);

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_SCHEDULER_MAIN_H_
