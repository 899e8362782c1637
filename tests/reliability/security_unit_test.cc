// services/security/ without a network: API key parsing and checking,
// the constant-time compare, TLS material checks with certificates made
// by openssl, and the planes' flag rules. Errors name the flag and the
// file, and never repeat a key.
#include <fstream>

#include "gtest/gtest.h"
#include "services/security/api_keys.h"
#include "services/security/public_plane.h"
#include "services/security/secret_compare.h"
#include "services/security/tls_material.h"
#include "services/security/worker_plane.h"
#include "tests/engine/test_util.h"
#include "tests/reliability/test_certs.h"

namespace spar {
namespace {

TEST(SecretCompareTest, EqualOnlyForEqualBytes) {
  EXPECT_TRUE(SecretsEqual("sk-abc", "sk-abc"));
  EXPECT_TRUE(SecretsEqual("", ""));
  EXPECT_FALSE(SecretsEqual("sk-abc", "sk-abd"));
  EXPECT_FALSE(SecretsEqual("sk-abc", "sk-ab"));
  EXPECT_FALSE(SecretsEqual("sk-abc", "sk-abcd"));
  EXPECT_FALSE(SecretsEqual(absl::string_view("a\0b", 3), absl::string_view("a\0c", 3)));
}

TEST(ApiKeysTest, OffByDefaultAndAcceptsAnything) {
  ApiKeys keys;
  EXPECT_FALSE(keys.enabled());
  EXPECT_TRUE(keys.CheckAuthorization("").ok());
  EXPECT_TRUE(keys.CheckAuthorization("Bearer whatever").ok());
}

TEST(ApiKeysTest, FromFlagAndFile) {
  const std::string dir = testing::TempDir("api_keys");
  const std::string file = dir + "/keys";
  std::ofstream(file) << "# team keys\n\n  sk-file-one  \nsk-file-two\n";
  auto keys = ApiKeys::Load("sk-flag-a,sk-flag-b", file);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 4u);
  for (const char* k : {"sk-flag-a", "sk-flag-b", "sk-file-one", "sk-file-two"}) EXPECT_TRUE(keys->Matches(k)) << k;
  EXPECT_FALSE(keys->Matches("# team keys"));
  EXPECT_FALSE(keys->Matches(""));
}

TEST(ApiKeysTest, CheckAuthorizationHeader) {
  auto keys = ApiKeys::Load("sk-right", "");
  ASSERT_TRUE(keys.ok());
  EXPECT_TRUE(keys->CheckAuthorization("Bearer sk-right").ok());
  EXPECT_TRUE(keys->CheckAuthorization("bearer sk-right").ok());
  EXPECT_TRUE(keys->CheckAuthorization("  BEARER   sk-right ").ok());
  for (const char* bad : {"", "sk-right", "Basic sk-right", "Bearer", "Bearer ", "Bearer sk-wrong", "Bearer sk-righ",
                          "Bearer sk-rightx", "Bearersk-right"}) {
    absl::Status s = keys->CheckAuthorization(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << "'" << bad << "'";
    EXPECT_EQ(s.message().find("sk-"), absl::string_view::npos) << "the error repeats the key: " << s.message();
  }
}

TEST(ApiKeysTest, BadKeysAreRejectedWithoutRepeatingThem) {
  for (const char* bad : {"sk-ok,", "sk has space", "sk-\x01", "sk-\xc3\xa9"}) {
    auto keys = ApiKeys::Load(bad, "");
    ASSERT_FALSE(keys.ok()) << bad;
    EXPECT_NE(keys.status().message().find("--api-key"), absl::string_view::npos) << keys.status();
    EXPECT_EQ(keys.status().message().find("sk"), absl::string_view::npos) << keys.status();
  }
  EXPECT_FALSE(ApiKeys::Load(std::string(ApiKeys::kMaxKeyBytes + 1, 'k'), "").ok());
  auto missing = ApiKeys::Load("", "/nonexistent/keys");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  const std::string dir = testing::TempDir("api_keys_bad");
  std::ofstream(dir + "/empty") << "# nothing\n";
  EXPECT_NE(ApiKeys::Load("", dir + "/empty").status().message().find("holds no key"), absl::string_view::npos);
  std::ofstream(dir + "/spacey") << "good-key\nbad key\n";
  auto spacey = ApiKeys::Load("", dir + "/spacey");
  ASSERT_FALSE(spacey.ok());
  EXPECT_NE(spacey.status().message().find("line 2"), absl::string_view::npos) << spacey.status();
}

class TlsMaterialTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir("tls_material");
    ca_ = testing::MakeCa(dir_, "ca");
    other_ca_ = testing::MakeCa(dir_, "other-ca");
    leaf_ = testing::MakeLeaf(dir_, "leaf", ca_, "DNS:localhost,IP:127.0.0.1");
  }
  std::string dir_;
  testing::CertFiles ca_, other_ca_, leaf_;
};

TEST_F(TlsMaterialTest, LoadsAMatchingPair) {
  auto m = LoadTlsMaterial({leaf_.cert, leaf_.key, ca_.cert}, "--tls");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NE(m->cert_chain.find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_NE(m->private_key.find("PRIVATE KEY"), std::string::npos);
  EXPECT_NE(m->root_certs.find("BEGIN CERTIFICATE"), std::string::npos);
  auto none = LoadTlsMaterial({}, "--tls");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->cert_chain.empty());
}

TEST_F(TlsMaterialTest, ErrorsNameTheFlagAndTheFile) {
  struct Bad {
    TlsFiles files;
    std::string want;
  };
  const std::vector<Bad> cases = {
      {{leaf_.cert, "", ""}, "--tls-cert and --tls-key go together"},
      {{"/nonexistent.crt", leaf_.key, ""}, "--tls-cert: cannot read /nonexistent.crt"},
      {{leaf_.key, leaf_.key, ""}, "--tls-cert: " + leaf_.key + " holds no PEM certificate"},
      {{leaf_.cert, leaf_.cert, ""}, "--tls-key: " + leaf_.cert + " holds no PEM private key"},
      {{leaf_.cert, other_ca_.key, ""}, "does not belong to the certificate"},
      {{leaf_.cert, leaf_.key, leaf_.key}, "--tls-ca: " + leaf_.key + " holds no PEM certificate"},
  };
  for (const Bad& b : cases) {
    auto m = LoadTlsMaterial(b.files, "--tls");
    ASSERT_FALSE(m.ok()) << b.want;
    EXPECT_NE(m.status().message().find(b.want), absl::string_view::npos) << m.status();
  }
}

TEST_F(TlsMaterialTest, PlaneFlagRules) {
  EXPECT_TRUE(PublicPlane::Create({}).ok());
  auto ca_only = PublicPlane::Create({.tls = {"", "", ca_.cert}});
  EXPECT_NE(ca_only.status().message().find("--tls-ca"), absl::string_view::npos) << ca_only.status();
  auto tls = PublicPlane::Create({.tls = {leaf_.cert, leaf_.key, ""}, .api_keys = "k1,k2"});
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_TRUE(tls->tls());
  EXPECT_FALSE(tls->client_certificates());
  EXPECT_EQ(tls->Describe(), "TLS, 2 API key(s)");

  auto partial = WorkerPlane::Create({.tls = {leaf_.cert, leaf_.key, ""}});
  EXPECT_NE(partial.status().message().find("go together"), absl::string_view::npos) << partial.status();
  auto name_only = WorkerPlane::Create({.server_name = "spar-worker"});
  EXPECT_FALSE(name_only.ok());
  auto no_token = WorkerPlane::Create({.token_file = dir_ + "/missing"});
  EXPECT_EQ(no_token.status().code(), absl::StatusCode::kNotFound);
  std::ofstream(dir_ + "/token") << "plane-secret\n";
  auto mtls = WorkerPlane::Create({.tls = {leaf_.cert, leaf_.key, ca_.cert}, .token_file = dir_ + "/token"});
  ASSERT_TRUE(mtls.ok()) << mtls.status();
  EXPECT_TRUE(mtls->mutual_tls());
  EXPECT_TRUE(mtls->token());
  EXPECT_EQ(mtls->Describe(), "mutual TLS, worker token");
}

}  // namespace
}  // namespace spar
