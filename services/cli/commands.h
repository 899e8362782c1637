// Entry points of the `spar` subcommands; each returns a process exit code.
#ifndef SPAR_SERVICES_CLI_COMMANDS_H_
#define SPAR_SERVICES_CLI_COMMANDS_H_

namespace spar {

int RunMakeTiny(int argc, char** argv);
int RunGenerate(int argc, char** argv);
int RunCluster(int argc, char** argv);
int RunWorkers(int argc, char** argv);
int RunPlan(int argc, char** argv);

}  // namespace spar

#endif  // SPAR_SERVICES_CLI_COMMANDS_H_
