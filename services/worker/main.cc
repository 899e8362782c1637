// spar-worker: one pipeline stage (one process per GPU; a stage leader is
// TP rank 0). See worker_main.cc for the flags.
#include "services/worker/worker_main.h"

int main(int argc, char** argv) { return spar::RunWorkerMain(argc, argv, 1); }
