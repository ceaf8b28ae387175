#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "conveyor/core/environment.h"
#include "conveyor/io/ca_certificates.h"

namespace conveyor {

/// A role's temporary credentials, as a local AWS endpoint gives them.
struct RoleCredentials {
  /// Where they came from, for messages: "the instance metadata service
  /// (role NAME)" or "the container credentials endpoint at URL" (no secret).
  std::string from;
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  std::chrono::system_clock::time_point expiration;
};

/// Where a role's credentials are read when no keys are given, as the AWS
/// SDKs find it (role_credentials_endpoint).
struct RoleCredentialsEndpoint {
  enum class Kind {
    kWebIdentity,       ///< EKS IRSA: STS AssumeRoleWithWebIdentity at `url` (XML).
    kContainer,         ///< ECS task role or EKS Pod Identity: GET `url` (JSON).
    kInstanceMetadata,  ///< An EC2 instance's role: IMDS at the base URL `url`.
    /// IAM Identity Center (SSO): GET `url` (the portal's role credentials
    /// of an account and role) with the token `aws sso login` cached for
    /// `sso_start_url` in the folder `authorization_file` (JSON).
    kSso,
    /// A profile's credential_process: `command` run (its words as
    /// split_command_line splits them; no shell), its standard
    /// output JSON (Version 1, AccessKeyId, SecretAccessKey, SessionToken,
    /// Expiration; the last two optional).
    kProcess,
    /// A profile's role_arn: STS AssumeRole at `url`, signed (SigV4, for
    /// `region`) with `source`'s keys, or with the credentials read from
    /// `source_endpoint` (XML answer).
    kAssumeRole,
  };
  /// Keys that sign a request for other credentials (secrets: never shown).
  struct SourceKeys {
    std::string access_key_id;
    std::string secret_access_key;
    std::string session_token;
    std::string from;  ///< Where they were found: "~/.aws/credentials [base]", "the environment (AWS_ACCESS_KEY_ID)".
  };
  Kind kind = Kind::kInstanceMetadata;
  std::string url;
  /// Container: the Authorization header's value (a secret: never shown),
  /// or the file holding it (read at each read: EKS rotates it). Web
  /// identity: the file of the identity token (read at each read). SSO:
  /// the folder of `aws sso login`'s cached tokens (read at each read).
  std::string authorization;
  std::string authorization_file;
  /// Web identity, assume role: the role to assume and the session's name.
  std::string role_arn;
  std::string session_name;
  /// Assume role: the keys that sign the request, the region it is signed
  /// for, the role's external id (empty: none) and the session's duration
  /// in seconds (0: STS's default, an hour).
  SourceKeys source;
  std::string region;
  std::string external_id;
  int64_t duration_seconds = 0;
  /// Assume role, when `source` holds no keys: where the credentials that
  /// sign the request are read, each time the role is assumed (another
  /// profile's role, a chain; its IAM Identity Center role or
  /// credential_process; the instance's or the container's role).
  std::shared_ptr<const RoleCredentialsEndpoint> source_endpoint;
  /// SSO: the start URL whose cached token is sent.
  std::string sso_start_url;
  /// SSO: where a cached token about to expire is refreshed with its
  /// refresh token (SSO OIDC's CreateToken), as the AWS CLI refreshes it.
  std::string sso_oidc_url;
  /// Process: the command's words (they may hold secrets: only the program
  /// is shown) and the profile that names it.
  std::vector<std::string> command;
  std::string profile;
  /// Seconds each request may take: the SDKs' defaults, 1 for the metadata
  /// service (off EC2 nothing answers), 2 for a container's, 5 for STS;
  /// AWS_METADATA_SERVICE_TIMEOUT sets the first two, as in the SDKs. A
  /// process gets kProcessTimeoutSeconds (the SDKs wait without limit).
  double timeout = 1;

  /// "the container credentials endpoint at URL", "the instance metadata
  /// service at URL", "web identity (role ARN, through STS at URL)", "IAM
  /// Identity Center (START_URL, through the portal at URL)",
  /// "credential_process of profile 'P' (PROGRAM)", "role ARN, assumed with
  /// the keys of FROM through STS at URL", "role ARN, assumed with the
  /// credentials of SOURCE through STS at URL" (SOURCE: the source
  /// endpoint's own description): no secret.
  std::string describe() const;
};

/// AWS's URL of `service` in `region`: "https://<service>.<region>.amazonaws.com",
/// or ".amazonaws.com.cn" in the China regions ("cn-*"), whose partition
/// has a domain of its own. The docs below write the first form.
std::string aws_service_url(const std::string& service, const std::string& region);

/// The settings of an IAM Identity Center (SSO) profile of ~/.aws/config:
/// its own sso_start_url and sso_region (the legacy form), or those of the
/// [sso-session NAME] its sso_session names.
struct SsoProfile {
  std::string start_url;
  std::string region;
  std::string account_id;
  std::string role_name;
};

/// Where an SSO profile's role credentials are read: the portal at
/// AWS_ENDPOINT_URL_SSO, else https://portal.sso.<region>.amazonaws.com
/// (/federation/credentials for the account and role), with the token of
/// `aws sso login` from $HOME/.aws/sso/cache; a token that expires within
/// kSsoRefreshWindow is refreshed at AWS_ENDPOINT_URL_SSO_OIDC, else
/// https://oidc.<region>.amazonaws.com, when the cache holds its refresh
/// token (an sso-session's login), and written back to the cache. Throws
/// Error{kConfig} naming what the profile lacks. Thread-safe.
RoleCredentialsEndpoint sso_endpoint(const SsoProfile& profile, const GetEnv& getenv = process_env);

/// How long before it expires a cached SSO token is refreshed: botocore's
/// window, so that the AWS CLI and conveyor refresh at the same time.
inline constexpr std::chrono::minutes kSsoRefreshWindow{15};

/// Seconds a credential_process may run before it is killed: long enough for
/// a helper that asks a remote service, short enough that a hung one is
/// named rather than waited on forever.
inline constexpr double kProcessTimeoutSeconds = 60;

/// The words of a command line as the AWS CLI splits credential_process
/// (Python's shlex.split): nothing is expanded; spaces, tabs and line ends
/// separate words; '...' keeps its text; "..." keeps its text, a backslash
/// there escaping only `"` or itself; a backslash outside quotes keeps the
/// next character.
/// Throws Error{kConfig} for an unterminated quote or a trailing backslash.
std::vector<std::string> split_command_line(std::string_view command);

/// Where profile `profile`'s credential_process `command` is run. Throws
/// Error{kConfig} when the command has no words or does not split.
RoleCredentialsEndpoint process_endpoint(const std::string& profile, const std::string& command);

/// A profile's role_arn, as ~/.aws/config gives it.
struct AssumeRoleProfile {
  std::string name;  ///< The profile's, for messages.
  std::string role_arn;
  std::string session_name;      ///< role_session_name; empty: "conveyor-<unix time>".
  std::string external_id;       ///< external_id; empty: none.
  std::string duration_seconds;  ///< duration_seconds; empty: STS's default.
  std::string region;            ///< STS's region (S3's: AWS_REGION, ..., the profile's); empty: none.
  RoleCredentialsEndpoint::SourceKeys source;
};

/// Where `profile`'s role is assumed: STS at AWS_ENDPOINT_URL_STS, else
/// AWS_ENDPOINT_URL, else https://sts.<region>.amazonaws.com for
/// profile.region, else https://sts.amazonaws.com (signed for us-east-1),
/// as the AWS SDKs ask it. Throws Error{kConfig} naming the profile for a duration_seconds that
/// is not a whole number of seconds in [900, 43200]. Thread-safe.
RoleCredentialsEndpoint assume_role_endpoint(const AssumeRoleProfile& profile, const GetEnv& getenv = process_env);

/// EKS's web identity (IRSA) when the environment sets it up:
/// AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN (both, as the AWS SDKs
/// require), AWS_ROLE_SESSION_NAME (else "conveyor-<unix time>"), and STS at
/// AWS_ENDPOINT_URL_STS, else AWS_ENDPOINT_URL, else
/// https://sts.<AWS_REGION or AWS_DEFAULT_REGION>.amazonaws.com, else
/// https://sts.amazonaws.com. The SDKs ask it before the shared files.
std::optional<RoleCredentialsEndpoint> web_identity_endpoint(const GetEnv& getenv = process_env);

/// The endpoint of the role credentials for the environment, in the AWS
/// SDKs' order:
/// - a container's: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (on
///   http://169.254.170.2), else AWS_CONTAINER_CREDENTIALS_FULL_URI, with
///   AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE, else
///   AWS_CONTAINER_AUTHORIZATION_TOKEN;
/// - else the instance metadata service: AWS_EC2_METADATA_SERVICE_ENDPOINT,
///   else http://169.254.169.254, unless AWS_EC2_METADATA_DISABLED is "true"
///   (then none);
/// each with AWS_METADATA_SERVICE_TIMEOUT's timeout when set.
/// Throws Error{kConfig} for a full URI the SDKs refuse: http:// to another
/// host than a loopback one or ECS's and EKS's (169.254.170.2,
/// 169.254.170.23, fd00:ec2::23); any https:// is taken. Thread-safe.
std::optional<RoleCredentialsEndpoint> role_credentials_endpoint(const GetEnv& getenv = process_env);

/// Reads the role's credentials from `endpoint`, each request bounded by
/// its timeout, the local endpoints' through no proxy.
/// - Instance metadata (IMDSv2): a session token (PUT /latest/api/token; a
///   service that refuses it with 403, 404 or 405 is asked without one, as
///   IMDSv1), the role's name (GET /latest/meta-data/iam/security-credentials/),
///   then its credentials (GET .../<role>).
/// - Container: GET the URL with the Authorization header.
/// Both answer JSON with AccessKeyId, SecretAccessKey, Token, Expiration.
/// - Assume role: POST AssumeRole (a form with the role, the session's
///   name, the external id and duration when set) to STS, signed with the
///   source's keys, or with the credentials read from `source_endpoint`
///   first (a failure there names the role, then the source's own message),
///   through the proxy if any, TLS as for web identity; XML answer.
/// - Web identity: POST AssumeRoleWithWebIdentity (a form with the role, the
///   session's name and the token file's token) to STS, through the proxy
///   if any, TLS verified against `ca` when set; XML answer.
/// - Process: the command run with the process's environment, standard
///   input /dev/null, killed past its timeout; a non-zero exit is a failure
///   naming its status and the first line of its standard error.
/// - SSO: the newest token cached for the start URL (a JSON file of the
///   cache folder with its startUrl, accessToken and expiresAt), refreshed
///   first when it expires within kSsoRefreshWindow and the file holds its
///   refresh token and a client registration still valid: POST CreateToken
///   to `sso_oidc_url`, the new token written back over the file (a side
///   effect on the user's ~/.aws/sso/cache, as the AWS CLI's); an expired
///   one not refreshed says why and to run `aws sso login`. The token is
///   sent to the portal as the AWS CLI does (x-amz-sso_bearer_token),
///   through the proxy if any, TLS as STS's; JSON answer (roleCredentials).
/// Throws FetchError whose message names the endpoint and the step ("the
/// instance metadata service at <url>: <step>: <cause>"), never a
/// credential. Thread-safe.
RoleCredentials read_role_credentials(const RoleCredentialsEndpoint& endpoint, const CaCertificates* ca = nullptr);

/// A role's credentials for a store's requests: read at the first use, read
/// again when they expire within 10 minutes (the AWS SDKs' mandatory
/// refresh), kept while a new read fails and they are still valid.
///
/// Thread-safety: current() may be called from many threads; one reads at a time.
class RefreshingRoleCredentials {
 public:
  /// How long after a failed read, before any succeeded, the endpoint is
  /// asked again (not the instance metadata service: off EC2 nothing
  /// answers): long enough not to slow every request, short enough that a
  /// job recovers soon after `aws sso login` or a passing STS failure.
  static constexpr std::chrono::seconds kRetryAfterFailure{30};

  /// `ca`: what STS's and the SSO portal's TLS is verified against (the store's).
  explicit RefreshingRoleCredentials(RoleCredentialsEndpoint endpoint, CaCertificates ca = {},
                                     std::chrono::seconds retry_after = kRetryAfterFailure);

  /// The credentials to sign with now, or null when no read succeeded yet
  /// (not an EC2 instance, or one without a role; no `aws sso login`):
  /// requests then go unsigned, and source() says why. The instance
  /// metadata service's first answer is kept; the other endpoints are asked
  /// again `retry_after` after a failure, not for each request; credentials
  /// read again while still valid are re-read at most every `retry_after`
  /// (an endpoint may answer with ones that expire within 10 minutes).
  /// Credentials that expired before they were read (a clock ahead) count
  /// as a failed read. Throws FetchError (kConnection) when expired
  /// credentials cannot be read again (asked again `retry_after` later),
  /// and kCancelled when the calling thread's Cancellation ends the read
  /// (core/cancellation.h; not counted as the endpoint's failure).
  std::shared_ptr<const RoleCredentials> current();
  /// What current() would return, found without reading credentials or
  /// waiting for a read under way (so a store's event loop may ask): the
  /// credentials read before while they need no refresh, or null where
  /// current() has settled that there are none to be had (requests go
  /// unsigned); nullopt when current() would read (none read or tried yet,
  /// or due a read).
  std::optional<std::shared_ptr<const RoleCredentials>> at_hand() const;
  /// Where the credentials come from: RoleCredentials::from once read,
  /// endpoint.describe() before, or after a failed first read why it failed
  /// ("the instance metadata service at URL: STEP: CAUSE"). Never waits for
  /// a read under way.
  std::string source() const;

 private:
  // What the last read left.
  struct State {
    std::shared_ptr<const RoleCredentials> credentials;
    bool tried = false;
    std::string failure;                              // Why the last read failed.
    std::chrono::system_clock::time_point failed_at;  // When.
    std::chrono::system_clock::time_point read_at;    // When `credentials` were read.
  };
  // Whether `state` needs no read at `now`: fresh credentials, or none to be had.
  bool fresh(const State& state, std::chrono::system_clock::time_point now) const;
  bool none_to_be_had(const State& state, std::chrono::system_clock::time_point now) const;
  // current()'s read when `state` is due one, what it leaves in `state`.
  std::shared_ptr<const RoleCredentials> read(State& state, std::chrono::system_clock::time_point now) const;

  const RoleCredentialsEndpoint endpoint_;
  const CaCertificates ca_;
  const std::chrono::seconds retry_after_;
  std::mutex mu_;  // Held by current() while it reads: one read at a time.
  // Written by current() under mu_ and state_mu_, after its read; read under
  // either. state_mu_ is never held while reading: at_hand() and source()
  // never wait for a read.
  mutable std::mutex state_mu_;
  State state_;
};

}  // namespace conveyor
