#include "services/common/security_flags.h"

namespace spar {

void AddPublicPlaneFlags(ArgParser* args, PublicPlaneOptions* o) {
  args->AddString("tls-cert", &o->tls.cert, "public API: serve TLS with this PEM certificate chain (with --tls-key)");
  args->AddString("tls-key", &o->tls.key, "public API: the PEM private key of --tls-cert");
  args->AddString("tls-ca", &o->tls.ca, "public API: require client certificates signed by this PEM CA (mutual TLS)");
  args->AddString("api-key", &o->api_keys,
                  "public API: require \"Authorization: Bearer <key>\" with one of these comma-separated keys");
  args->AddString("api-key-file", &o->api_key_file,
                  "public API: the same, keys read from this file (one per line; keeps keys out of ps)");
}

void AddWorkerPlaneFlags(ArgParser* args, WorkerPlaneOptions* o) {
  args->AddString("worker-tls-cert", &o->tls.cert,
                  "worker plane: mutual TLS with this PEM certificate (with --worker-tls-key and --worker-tls-ca)");
  args->AddString("worker-tls-key", &o->tls.key, "worker plane: the PEM private key of --worker-tls-cert");
  args->AddString("worker-tls-ca", &o->tls.ca, "worker plane: the PEM CA that signed every plane certificate");
  args->AddString("worker-tls-server-name", &o->server_name,
                  "worker plane: the name workers' certificates carry (default: the host of each address)");
  args->AddString("worker-token-file", &o->token_file,
                  "worker plane: a shared token (first line of the file) every plane call must carry");
}

}  // namespace spar
