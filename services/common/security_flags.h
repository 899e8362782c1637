// The security flags of the daemons (services/security/): one definition
// so the scheduler and the workers spell them alike. Every flag has its
// SPAR_* environment twin; secrets themselves come from files so they
// never show in a process list or a log.
#ifndef SPAR_SERVICES_COMMON_SECURITY_FLAGS_H_
#define SPAR_SERVICES_COMMON_SECURITY_FLAGS_H_

#include "services/common/args.h"
#include "services/security/public_plane.h"
#include "services/security/worker_plane.h"

namespace spar {

// --tls-cert --tls-key --tls-ca --api-key --api-key-file
void AddPublicPlaneFlags(ArgParser* args, PublicPlaneOptions* options);
// --worker-tls-cert --worker-tls-key --worker-tls-ca --worker-tls-server-name --worker-token-file
void AddWorkerPlaneFlags(ArgParser* args, WorkerPlaneOptions* options);

}  // namespace spar

#endif  // SPAR_SERVICES_COMMON_SECURITY_FLAGS_H_
