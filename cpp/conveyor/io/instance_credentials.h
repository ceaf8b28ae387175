#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "conveyor/core/environment.h"

namespace conveyor {

/// Initialises libcurl once per process (thread-safe). Throws Error{kConfig}
/// when it cannot.
void init_curl_once();

/// An EC2 instance role's temporary credentials, as its instance metadata
/// service gives them.
struct InstanceRoleCredentials {
  std::string role;  ///< The role's name (not a secret).
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  std::chrono::system_clock::time_point expiration;
};

/// The instance metadata service's base URL, as the AWS SDKs find it:
/// AWS_EC2_METADATA_SERVICE_ENDPOINT, else "http://169.254.169.254"; none
/// when AWS_EC2_METADATA_DISABLED is "true". Thread-safe.
std::optional<std::string> instance_metadata_endpoint(const GetEnv& getenv = process_env);

/// Reads the instance role's credentials from the service at `endpoint`
/// (IMDSv2): a session token (PUT /latest/api/token; a service that refuses
/// it with 403, 404 or 405 is asked without one, as IMDSv1), the role's name
/// (GET /latest/meta-data/iam/security-credentials/), then its credentials
/// (GET .../<role>, JSON). Each request is bounded by `timeout` seconds (1 by
/// default, as the AWS SDKs: off EC2 nothing answers) and goes through no
/// proxy. Throws FetchError whose message names the step ("the instance
/// metadata service at <endpoint>: <step>: <cause>"), never a credential.
/// Thread-safe.
InstanceRoleCredentials read_instance_credentials(const std::string& endpoint, double timeout = 1.0);

/// An instance role's credentials for a store's requests: read at the first
/// use, read again when they expire within 10 minutes (as the AWS SDKs'
/// mandatory refresh), kept while a new read fails and they are still valid.
///
/// Thread-safety: current() may be called from many threads; one reads at a time.
class InstanceCredentials {
 public:
  explicit InstanceCredentials(std::string endpoint, double timeout = 1.0);

  /// The credentials to sign with now, or null when the first read failed
  /// (not an EC2 instance, or no role): requests then go unsigned, and
  /// source() says why. That first answer is kept: the service is not asked
  /// again for each request. Throws FetchError (kConnection) when expired
  /// credentials cannot be read again.
  std::shared_ptr<const InstanceRoleCredentials> current();
  /// "the instance metadata service (role NAME)", or before the first read
  /// "the instance metadata service at URL", or after a failed first read
  /// why it failed ("the instance metadata service at URL: STEP: CAUSE").
  std::string source() const;

 private:
  const std::string endpoint_;
  const double timeout_;
  mutable std::mutex mu_;
  std::shared_ptr<const InstanceRoleCredentials> credentials_;
  bool tried_ = false;
  std::string failure_;  // Why the first read failed.
};

}  // namespace conveyor
