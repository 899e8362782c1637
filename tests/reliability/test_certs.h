// Certificates for the TLS tests, made on the spot by the openssl command
// line tool (Debian package openssl): a CA, and leaf certificates it signs
// with given subject alternative names. P-256 keys, valid for two days.
#ifndef SPAR_TESTS_RELIABILITY_TEST_CERTS_H_
#define SPAR_TESTS_RELIABILITY_TEST_CERTS_H_

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace spar::testing {

struct CertFiles {
  std::string cert, key;
};

inline bool RunShell(const std::string& command) {
  const int rc = std::system(absl::StrCat(command, " >/dev/null 2>&1").c_str());
  EXPECT_EQ(rc, 0) << command;
  return rc == 0;
}

// A self-signed CA: DIR/NAME.crt, DIR/NAME.key.
inline CertFiles MakeCa(const std::string& dir, const std::string& name) {
  CertFiles f{absl::StrCat(dir, "/", name, ".crt"), absl::StrCat(dir, "/", name, ".key")};
  RunShell(absl::StrCat("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj '/CN=",
                        name, "' -keyout ", f.key, " -out ", f.cert));
  return f;
}

// A leaf signed by `ca`; `san` like "DNS:spar-worker,IP:127.0.0.1".
inline CertFiles MakeLeaf(const std::string& dir, const std::string& name, const CertFiles& ca, const std::string& san) {
  CertFiles f{absl::StrCat(dir, "/", name, ".crt"), absl::StrCat(dir, "/", name, ".key")};
  const std::string csr = absl::StrCat(dir, "/", name, ".csr");
  const std::string ext = absl::StrCat(dir, "/", name, ".ext");
  std::ofstream(ext) << "subjectAltName=" << san << "\n";
  RunShell(absl::StrCat("openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj '/CN=", name,
                        "' -keyout ", f.key, " -out ", csr));
  RunShell(absl::StrCat("openssl x509 -req -in ", csr, " -CA ", ca.cert, " -CAkey ", ca.key,
                        " -CAcreateserial -days 2 -extfile ", ext, " -out ", f.cert));
  return f;
}

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_RELIABILITY_TEST_CERTS_H_
