#include "services/security/tls_material.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace spar {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

absl::StatusOr<std::string> ReadFile(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > (1u << 20)) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is over 1 MiB"));
  return ss.str();
}

BioPtr MemBio(const std::string& pem) { return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()))); }

// The first certificate of a PEM bundle (null when there is none).
X509Ptr FirstCertificate(const std::string& pem) {
  BioPtr bio = MemBio(pem);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return cert;
}

}  // namespace

absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsFiles& files, absl::string_view flag_prefix) {
  const std::string cert_flag = absl::StrCat(flag_prefix, "-cert");
  const std::string key_flag = absl::StrCat(flag_prefix, "-key");
  const std::string ca_flag = absl::StrCat(flag_prefix, "-ca");
  TlsMaterial m;
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(cert_flag, " and ", key_flag, " go together: set both or neither"));
  }
  if (!files.cert.empty()) {
    auto cert = ReadFile(files.cert, cert_flag);
    if (!cert.ok()) return cert.status();
    auto key = ReadFile(files.key, key_flag);
    if (!key.ok()) return key.status();
    X509Ptr leaf = FirstCertificate(*cert);
    if (leaf == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(cert_flag, ": ", files.cert, " holds no PEM certificate"));
    }
    BioPtr kbio = MemBio(*key);
    PkeyPtr pkey(PEM_read_bio_PrivateKey(kbio.get(), nullptr, nullptr, nullptr));
    ERR_clear_error();
    if (pkey == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(key_flag, ": ", files.key, " holds no PEM private key (or it is encrypted)"));
    }
    if (X509_check_private_key(leaf.get(), pkey.get()) != 1) {
      ERR_clear_error();
      return absl::InvalidArgumentError(
          absl::StrCat(key_flag, ": the key in ", files.key, " does not belong to the certificate in ", files.cert));
    }
    m.cert_chain = std::move(*cert);
    m.private_key = std::move(*key);
  }
  if (!files.ca.empty()) {
    auto ca = ReadFile(files.ca, ca_flag);
    if (!ca.ok()) return ca.status();
    if (FirstCertificate(*ca) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(ca_flag, ": ", files.ca, " holds no PEM certificate"));
    }
    m.root_certs = std::move(*ca);
  }
  return m;
}

}  // namespace spar
