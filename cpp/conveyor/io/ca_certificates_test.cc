#include "conveyor/io/ca_certificates.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>
#include <string>

namespace conveyor {
namespace {

struct Machine {
  std::map<std::string, std::string> env;
  std::set<std::string> files;

  CaCertificates find(const CaCertificates& builtin) const {
    return find_ca_certificates(
        [this](const std::string& name) {
          auto it = env.find(name);
          return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
        },
        [this](const std::string& path) { return files.count(path) > 0; }, builtin);
  }
};

const CaCertificates kDebianBuiltin{"/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/certs"};

TEST(CaCertificatesTest, TheBuiltinBundleIsUsedWhereItExists) {
  Machine debian{{}, {"/etc/ssl/certs/ca-certificates.crt"}};
  EXPECT_EQ(debian.find(kDebianBuiltin), kDebianBuiltin);
}

TEST(CaCertificatesTest, ADebianBuiltLibcurlFindsFedorasBundle) {
  Machine fedora{{}, {"/etc/pki/tls/certs/ca-bundle.crt", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"}};
  EXPECT_EQ(fedora.find(kDebianBuiltin).file, "/etc/pki/tls/certs/ca-bundle.crt");
  Machine alpine{{}, {"/etc/ssl/cert.pem"}};
  EXPECT_EQ(alpine.find(kDebianBuiltin).file, "/etc/ssl/cert.pem");
}

TEST(CaCertificatesTest, TheEnvironmentWinsOverEveryBundle) {
  Machine machine{{{"SSL_CERT_FILE", "/my/ca.pem"}}, {"/etc/ssl/certs/ca-certificates.crt"}};
  EXPECT_EQ(machine.find(kDebianBuiltin), (CaCertificates{"/my/ca.pem", "/etc/ssl/certs"}));
  machine.env["CURL_CA_BUNDLE"] = "/curl/ca.pem";
  machine.env["SSL_CERT_DIR"] = "/my/certs";
  EXPECT_EQ(machine.find(kDebianBuiltin), (CaCertificates{"/curl/ca.pem", "/my/certs"}));
}

TEST(CaCertificatesTest, TheBundleAndTheFolderAreFoundApartAsOpensslFindsThem) {
  // A folder from the environment leaves the bundle to be found as without it.
  Machine fedora{{{"SSL_CERT_DIR", "/my/certs"}}, {"/etc/pki/tls/certs/ca-bundle.crt"}};
  EXPECT_EQ(fedora.find(kDebianBuiltin), (CaCertificates{"/etc/pki/tls/certs/ca-bundle.crt", "/my/certs"}));
  Machine debian{{{"SSL_CERT_DIR", "/my/certs"}}, {"/etc/ssl/certs/ca-certificates.crt"}};
  EXPECT_EQ(debian.find(kDebianBuiltin), (CaCertificates{"/etc/ssl/certs/ca-certificates.crt", "/my/certs"}));
}

TEST(CaCertificatesTest, WithNoBundleAnywhereTheBuiltinStaysSoTheErrorNamesIt) {
  Machine bare{{}, {}};
  EXPECT_EQ(bare.find(kDebianBuiltin), kDebianBuiltin);
}

}  // namespace
}  // namespace conveyor
