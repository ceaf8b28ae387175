#include "conveyor/io/ca_certificates.h"

#include <array>

namespace conveyor {

namespace {

// Where distributions keep their bundle, most common first (the list Go's
// crypto/x509 searches on Linux).
constexpr std::array<const char*, 6> kDistributionBundles = {
    "/etc/ssl/certs/ca-certificates.crt",                 // Debian, Ubuntu, Arch, Gentoo
    "/etc/pki/tls/certs/ca-bundle.crt",                   // Fedora, RHEL 6
    "/etc/ssl/ca-bundle.pem",                             // openSUSE
    "/etc/pki/tls/cacert.pem",                            // OpenELEC
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  // CentOS, RHEL 7
    "/etc/ssl/cert.pem",                                  // Alpine
};

std::string variable(const GetEnv& env, const char* name) { return env(name).value_or(""); }

}  // namespace

CaCertificates find_ca_certificates(const GetEnv& env, const std::function<bool(const std::string&)>& is_file,
                                    const CaCertificates& builtin) {
  CaCertificates found{variable(env, "CURL_CA_BUNDLE"), variable(env, "SSL_CERT_DIR")};
  if (found.file.empty()) found.file = variable(env, "SSL_CERT_FILE");
  if (found.folder.empty()) found.folder = builtin.folder;
  if (!found.file.empty()) return found;
  found.file = builtin.file;
  if (!builtin.file.empty() && is_file(builtin.file)) return found;
  for (const char* bundle : kDistributionBundles) {
    if (is_file(bundle)) {
      found.file = bundle;
      break;
    }
  }
  return found;
}

}  // namespace conveyor
