// `spar`: the command-line front end. Subcommands live in their own files.
#include <cstring>
#include <iostream>
#include <string>

#include "services/cli/commands.h"

namespace {

constexpr char kUsage[] =
    "usage: spar <command> [flags]\n"
    "commands:\n"
    "  generate    run a model in-process and stream a completion\n"
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
  std::cerr << "spar: unknown command \"" << command << "\"\n" << kUsage;
  return 2;
}
