#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "conveyor/core/environment.h"
#include "conveyor/io/role_credentials.h"

namespace conveyor {

/// Where and how `s3://bucket/key` URLs are read: the endpoint, the signing
/// region and the credentials, found the way the AWS tools find them
/// (resolve_s3_config). Credentials are never part of an error, a log line
/// or describe().
struct S3Config {
  std::string region = "us-east-1";  ///< The region requests are signed for.
  /// The store's base URL: "https://s3.<region>.amazonaws.com" for AWS, or an
  /// S3-compatible store's (MinIO, Ceph, R2, a local server).
  std::string endpoint_url;
  /// The bucket in the path (https://host/bucket/key) rather than in the host
  /// name (https://bucket.host/key).
  bool path_style = false;
  /// No credentials: requests are sent unsigned (public buckets).
  bool anonymous = false;
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  ///< Empty for long-term keys.
  /// When the profile names a role_arn, or no keys were found: where a
  /// role's credentials are read (EKS's
  /// web identity through STS, the profile's role_arn, SSO role or credential_process,
  /// a container's endpoint, else the EC2 instance metadata service unless
  /// disabled), by the store at its first request (io/role_credentials.h).
  std::optional<RoleCredentialsEndpoint> role_endpoint;
  /// Where keys were looked for before it ("storage_options,
  /// AWS_ACCESS_KEY_ID, ~/.aws/credentials and ~/.aws/config [default]"),
  /// for the message when the service gives none either.
  std::string looked_in;
  /// The endpoint is AWS's own for `region` (none was given): a bucket in
  /// another region is read from that region's endpoint (in_region).
  bool regional_endpoint = false;
  /// Where the credentials came from, for errors and stats: "storage_options",
  /// "environment (AWS_ACCESS_KEY_ID)", "~/.aws/credentials [default]",
  /// "anon=True", or "none found (looked in ...)".
  std::string credentials_source;

  /// "s3 endpoint https://..., region r, path-style, credentials from ...":
  /// what a user needs to see which store is read, without any secret.
  std::string describe() const;
};

/// The keys resolve_s3_config accepts (its `options`), s3fs's names where
/// s3fs has one: "key", "secret", "token", "anon", "profile", "region",
/// "endpoint_url", "addressing_style".
const std::vector<std::string>& s3_option_names();

/// The S3Config for `options` (storage_options, strings; they win over
/// everything else), then the environment and the AWS files, in the order
/// the AWS CLI and boto3 use:
/// - credentials: `key`/`secret`/`token`; `anon` ("true": unsigned);
///   AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), unless
///   a profile is named in `options`; then, unless a profile is named, EKS's
///   web identity (web_identity_endpoint(), role_endpoint); the profile's keys in the shared
///   credentials file (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials),
///   then in the config file (AWS_CONFIG_FILE, else ~/.aws/config), unless
///   the profile names a role_arn (assume_role_endpoint(), or
///   web_identity_endpoint() for its web_identity_token_file); the
///   profile's IAM Identity Center role (sso_endpoint()), then its
///   credential_process (process_endpoint()), each as role_endpoint. The
///   profile is `profile`, else AWS_PROFILE, else "default". None found: a
///   role's, from a container's credentials endpoint or the EC2 instance
///   metadata service (role_endpoint, role_credentials_endpoint(), read by
///   the store); without either, requests go unsigned, and
///   credentials_source says where it looked.
/// - region: `region`, AWS_REGION, AWS_DEFAULT_REGION, the profile's
///   `region` in the config file, else "us-east-1".
/// - endpoint: `endpoint_url`, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the
///   profile's `endpoint_url`, else "https://s3.<region>.amazonaws.com".
/// - addressing: `addressing_style` ("path", "virtual" or "auto", the
///   default): auto is path-style for an endpoint given by any of the
///   above (S3-compatible stores and local servers rarely have a DNS name
///   per bucket), virtual-hosted for AWS's own endpoint.
/// Throws Error{kConfig} naming the key for an unknown key or a bad value,
/// for a named profile that no file has, for a credential_process that
/// does not split into words, and for a role_arn it cannot assume (an MFA
/// code, a source profile without keys, an instance's or container's
/// credential_source), saying what to do instead.
S3Config resolve_s3_config(const std::map<std::string, std::string>& options, const GetEnv& getenv = process_env);

/// The S3Config of GCS's S3-compatible XML API for gs:// URLs, from
/// `options` (storage_options): `key` and `secret` (an HMAC key, both
/// required), `endpoint_url` (default "https://storage.googleapis.com"),
/// `region` (default "auto"); path-style. Throws Error{kConfig} naming the
/// key for a missing or unknown one.
S3Config gcs_config(const std::map<std::string, std::string>& options);

/// `text` with every byte but A-Z a-z 0-9 - . _ ~ (and "/" when
/// `keep_slash`) percent-encoded, as SigV4 canonicalises paths and query
/// values (and AWS's form posts take them).
std::string percent_encoded(std::string_view text, bool keep_slash = true);

/// `text` with ASCII letters lower-cased (schemes, keys of ~/.aws files,
/// hosts): no locale.
std::string ascii_lower(std::string text);

/// `config` for a bucket that lives in `region` (S3 says so in a reply's
/// x-amz-bucket-region header): signed for that region, and with AWS's own
/// endpoint, sent to that region's endpoint.
S3Config in_region(const S3Config& config, const std::string& region);

/// The http(s) URL of `s3://bucket/key` under `config`, the key
/// percent-encoded as S3 signs it (every byte but A-Z a-z 0-9 - . _ ~ and
/// "/"). Virtual-hosted addressing falls back to path-style for a bucket
/// name that cannot be a host name (upper case, dots over https, ...).
/// Throws Error{kConfig} naming the URL when it has no bucket.
std::string s3_http_url(const S3Config& config, std::string_view s3_url);

/// The http(s) URL of one ListObjectsV2 request for the keys of `bucket`
/// that start with `prefix`, continuing after `continuation_token` (empty:
/// the first page). Its query is in SigV4's canonical order (sorted names,
/// values percent-encoded), as the signature needs it.
std::string s3_list_url(const S3Config& config, std::string_view bucket, std::string_view prefix,
                        std::string_view continuation_token);

/// One page of a ListObjectsV2 reply: its objects (key, size) and the token of
/// the next page (empty on the last).
struct S3ListPage {
  std::vector<std::pair<std::string, uint64_t>> objects;
  std::string next_continuation_token;
};

/// Parses a ListObjectsV2 reply's XML. Throws Error{kRead} (no key) when it
/// is not one.
S3ListPage parse_s3_list_page(std::string_view xml);

/// "s3://bucket/some/prefix" -> ("bucket", "some/prefix"). Throws
/// Error{kConfig} naming the URL when it has no bucket.
std::pair<std::string, std::string> split_s3_url(std::string_view s3_url);

/// The sections of an AWS-style INI file (`[name]` headers, `key = value`
/// or `key: value` lines, `#`/`;` comments; nested blocks such as `s3 =`
/// followed by indented lines are skipped): section -> key -> value, as
/// botocore reads them (a "[profile  NAME]" header, its name split as by
/// shlex, is "profile NAME"). Exposed for tests.
std::map<std::string, std::map<std::string, std::string>> parse_aws_ini(std::string_view text);

/// The `<Code>` of an S3 XML error body ("NoSuchKey", "AccessDenied"), or ""
/// when the body is not one or the code is not a word of at most 64 letters,
/// digits, '.', '_' or '-' (a server's other bytes never reach a message).
std::string s3_error_code(std::string_view body);

}  // namespace conveyor
