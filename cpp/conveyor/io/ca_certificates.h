#pragma once

#include <functional>
#include <string>

#include "conveyor/core/environment.h"

namespace conveyor {

/// Where TLS peers' certificates are verified: a PEM bundle and/or a folder
/// of hashed certificates (OpenSSL's CAfile and CApath); empty: not set.
struct CaCertificates {
  std::string file;
  std::string folder;

  bool operator==(const CaCertificates&) const = default;
};

/// The CA certificates an HttpStore verifies TLS against, the bundle and the
/// folder each found as OpenSSL finds them, the one independent of the other:
/// - the bundle: CURL_CA_BUNDLE, else SSL_CERT_FILE, when set (curl's and
///   OpenSSL's variables, which the libcurl library itself does not read);
///   else libcurl's compiled-in bundle (`builtin.file`) when that file
///   exists; else the first bundle that exists where Linux distributions keep
///   one (Debian/Ubuntu, Fedora/RHEL, CentOS, openSUSE, Alpine); else
///   `builtin.file` (TLS then fails naming it). A wheel carries a libcurl
///   built on one distribution, whose compiled-in path may not exist on another.
/// - the folder: SSL_CERT_DIR when set, else `builtin.folder`.
/// `env` and `is_file` read the environment and the file system (tests pass
/// their own). Thread-safe when they are.
CaCertificates find_ca_certificates(const GetEnv& env, const std::function<bool(const std::string&)>& is_file,
                                    const CaCertificates& builtin);

}  // namespace conveyor
