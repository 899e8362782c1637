// spar-scheduler: admission, continuous batching and the public gRPC API in
// front of a pipeline of spar-worker stages. See scheduler_main.cc.
#include "services/scheduler/scheduler_main.h"

int main(int argc, char** argv) { return spar::RunSchedulerMain(argc, argv, 1); }
