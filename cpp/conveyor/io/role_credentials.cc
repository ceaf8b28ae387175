#include "conveyor/io/role_credentials.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "conveyor/core/cancellation.h"
#include "conveyor/core/error.h"
#include "conveyor/core/number_format.h"
#include "conveyor/io/curl_global.h"
#include "conveyor/io/remote.h"
#include "conveyor/io/s3.h"

extern char** environ;  // unistd.h declares it only under _GNU_SOURCE.

namespace conveyor {

namespace {

using Kind = FetchFailure::Kind;

// Replies of the metadata service are small; more is not one.
constexpr size_t kMaxReply = 64 << 10;
// The longest life an SSO token refreshed at OIDC may claim (a year; AWS
// gives hours): past it, `now + expiresIn` could overflow the clock.
constexpr int64_t kMaxSsoTokenSeconds = 366 * 24 * 3600;

// The largest file of the SSO cache read (the CLI's are a few hundred bytes).
constexpr uintmax_t kMaxSsoCacheFile = 1 << 20;

// What to do when the SSO token is missing, expired or refused.
const char* const kSsoLogin = " (run `aws sso login`)";

// A service's error code (STS's AccessDenied, OIDC's invalid_grant) as it
// may be shown: one word of at most 64 letters, digits or '_', and none of
// the `secrets` the request sent; else empty (a reply may echo what was sent).
std::string error_code(std::string_view code, const std::vector<std::string>& secrets = {}) {
  const bool word = !code.empty() && code.size() <= 64 && std::all_of(code.begin(), code.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  });
  const bool echoed = std::any_of(secrets.begin(), secrets.end(), [&](const std::string& secret) {
    return !secret.empty() && (secret.find(code) != std::string::npos || code.find(secret) != std::string_view::npos);
  });
  return word && !echoed ? std::string(code) : std::string();
}

// `url` without its trailing slashes (a base that paths are appended to).
std::string without_trailing_slashes(std::string url) {
  while (url.size() > 8 && url.back() == '/') url.pop_back();
  return url;
}
// The AWS SDKs' mandatory refresh: credentials this close to expiring are read again.
constexpr std::chrono::minutes kRefreshBefore{10};

struct Reply {
  long status = 0;
  std::string body;
};

size_t on_body(char* data, size_t, size_t count, void* user) {
  auto& body = *static_cast<std::string*>(user);
  if (body.size() + count > kMaxReply) return 0;
  body.append(data, count);
  return count;
}

// One request of a credentials read.
struct Request {
  std::string url;
  const char* method = "GET";
  std::vector<std::string> headers;  // Never shown: they may hold a token.
  std::string body;                  // Sent when not empty (a form).
  double timeout = 1;
  std::string what;                    // Names the request in errors.
  bool local = true;                   // A link-local or loopback endpoint: no proxy.
  const CaCertificates* ca = nullptr;  // What TLS is verified against (https), when set.
  std::string sigv4;                   // Signed with SigV4 ("aws:amz:REGION:SERVICE") when set,
  std::string access_key_id;           // with these keys (never shown).
  std::string secret_access_key;
};

// Performs `r`; throws FetchError named by r.what (never a header's value).
Reply request(const Request& r) {
  CURL* easy = curl_easy_init();
  if (easy == nullptr) throw std::bad_alloc();
  struct Cleanup {
    CURL* easy;
    curl_slist* headers = nullptr;
    ~Cleanup() {
      curl_slist_free_all(headers);
      curl_easy_cleanup(easy);
    }
  } cleanup{easy};
  for (const std::string& header : r.headers) {
    curl_slist* grown = curl_slist_append(cleanup.headers, header.c_str());
    if (grown == nullptr) throw std::bad_alloc();
    cleanup.headers = grown;
  }
  if (cleanup.headers != nullptr) curl_easy_setopt(easy, CURLOPT_HTTPHEADER, cleanup.headers);
  Reply reply;
  char error[CURL_ERROR_SIZE] = {};
  const long milliseconds = static_cast<long>(r.timeout * 1000);
  curl_easy_setopt(easy, CURLOPT_URL, r.url.c_str());
  curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, r.method);
  if (!r.body.empty()) {
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, r.body.c_str());
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE, static_cast<long>(r.body.size()));
  }
  if (r.local) curl_easy_setopt(easy, CURLOPT_NOPROXY, "*");
  if (!r.sigv4.empty()) {
    // Never the keys without SigV4 (a libcurl built without it would send
    // them as Basic authentication).
    if (curl_easy_setopt(easy, CURLOPT_AWS_SIGV4, r.sigv4.c_str()) != CURLE_OK) {
      throw FetchError({Kind::kOther, 0, r.what + ": this libcurl cannot sign with AWS SigV4"});
    }
    curl_easy_setopt(easy, CURLOPT_USERNAME, r.access_key_id.c_str());
    curl_easy_setopt(easy, CURLOPT_PASSWORD, r.secret_access_key.c_str());
  }
  if (r.ca != nullptr) {
    curl_easy_setopt(easy, CURLOPT_CAINFO, r.ca->file.empty() ? nullptr : r.ca->file.c_str());
    curl_easy_setopt(easy, CURLOPT_CAPATH, r.ca->folder.empty() ? nullptr : r.ca->folder.c_str());
  }
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, milliseconds);
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, milliseconds);
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &reply.body);
  const CURLcode code = curl_easy_perform(easy);
  if (code == CURLE_WRITE_ERROR) {  // on_body refused more than kMaxReply.
    throw FetchError({Kind::kOther, 0, r.what + ": a reply of more than " + std::to_string(kMaxReply) + " bytes"});
  }
  if (code != CURLE_OK) {
    const Kind kind = code == CURLE_OPERATION_TIMEDOUT ? Kind::kTimeout : Kind::kConnection;
    throw FetchError({kind, 0, r.what + ": " + (error[0] != '\0' ? std::string(error) : curl_easy_strerror(code))});
  }
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &reply.status);
  return reply;
}

// A UTC time as AWS's endpoints and tools write it: "2026-11-27T14:00:00Z",
// with fractions of a second (STS, SSO), "+00:00" (credential helpers) or
// "UTC" (older AWS CLIs' SSO cache) for the "Z".
std::chrono::system_clock::time_point parse_expiration(std::string text, const std::string& what) {
  for (const std::string_view suffix : {"+00:00", "UTC"}) {
    if (text.size() > suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
      text = text.substr(0, text.size() - suffix.size()) + "Z";
    }
  }
  if (const size_t dot = text.find('.'); dot != std::string::npos) text = text.substr(0, dot) + "Z";
  std::tm tm{};
  char zone = '\0';
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &zone) != 7 ||
      zone != 'Z') {
    // Not quoted: a reply's text may echo what was sent (a session token).
    throw FetchError({Kind::kOther, 0, what + ": an Expiration that is not a UTC time"});
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

}  // namespace

namespace {

// The credentials in a reply's JSON (both endpoints answer the same fields).
RoleCredentials parse_credentials(const std::string& body, const std::string& what) {
  // Parsed without exceptions: the body may be anything, and a parse error's
  // message could quote the secret.
  const nlohmann::json json = nlohmann::json::parse(body, nullptr, false);
  const auto field = [&](const char* name) -> std::string {
    if (!json.is_object() || !json.contains(name) || !json[name].is_string()) {
      throw FetchError({Kind::kOther, 0, what + ": a reply without " + name});
    }
    return json[name].get<std::string>();
  };
  if (json.is_object() && json.contains("Code") && json["Code"].is_string() && json["Code"] != "Success") {
    throw FetchError({Kind::kOther, 0, what + ": Code " + json["Code"].get<std::string>().substr(0, 64)});
  }
  RoleCredentials credentials;
  credentials.access_key_id = field("AccessKeyId");
  credentials.secret_access_key = field("SecretAccessKey");
  credentials.session_token = field("Token");
  credentials.expiration = parse_expiration(field("Expiration"), what);
  return credentials;
}

// The host of an http(s) URL, lower-cased, without brackets or port.
std::string host_of_url(const std::string& url) {
  const size_t start = url.find("://") == std::string::npos ? 0 : url.find("://") + 3;
  const size_t end = url.find_first_of("/?#", start);
  std::string authority = url.substr(start, end == std::string::npos ? std::string::npos : end - start);
  if (const size_t at = authority.rfind('@'); at != std::string::npos) authority = authority.substr(at + 1);
  if (!authority.empty() && authority[0] == '[') return ascii_lower(authority.substr(1, authority.find(']') - 1));
  return ascii_lower(authority.substr(0, authority.find(':')));
}

RoleCredentials read_instance_metadata(const std::string& endpoint, double timeout) {
  const std::string service = "the instance metadata service at " + endpoint;
  std::string token_header;
  const Reply token = request({endpoint + "/latest/api/token",
                               "PUT",
                               {"X-aws-ec2-metadata-token-ttl-seconds: 21600"},
                               "",
                               timeout,
                               service + ": its session token"});
  if (token.status == 200 && !token.body.empty()) {
    token_header = "X-aws-ec2-metadata-token: " + token.body;
  } else if (token.status != 403 && token.status != 404 && token.status != 405) {
    throw FetchError({Kind::kOther, 0, service + ": its session token (HTTP " + std::to_string(token.status) + ")"});
  }
  const std::string roles_url = endpoint + "/latest/meta-data/iam/security-credentials/";
  std::vector<std::string> headers;
  if (!token_header.empty()) headers.push_back(token_header);
  const Reply roles = request({roles_url, "GET", headers, "", timeout, service + ": the instance's role"});
  if (roles.status != 200 || roles.body.empty()) {
    throw FetchError({Kind::kOther, 0,
                      service + ": the instance's role (HTTP " + std::to_string(roles.status) +
                          (roles.status == 404 ? ": the instance has no role" : "") + ")"});
  }
  const std::string role = roles.body.substr(0, roles.body.find_first_of("\r\n"));
  const std::string what = service + ": the credentials of role " + role;
  const Reply reply = request({roles_url + role, "GET", headers, "", timeout, what});
  if (reply.status != 200) throw FetchError({Kind::kOther, 0, what + " (HTTP " + std::to_string(reply.status) + ")"});
  RoleCredentials credentials = parse_credentials(reply.body, what);
  credentials.from = "the instance metadata service (role " + role + ")";
  return credentials;
}

// The first line of the file `path` (a token), or a FetchError naming the variable.
std::string token_of_file(const std::string& path, const std::string& what, const char* variable) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  if (!file) throw FetchError({Kind::kOther, 0, what + ": " + variable + " " + path + " cannot be read"});
  std::string content = text.str();
  while (!content.empty() && (content.back() == '\n' || content.back() == '\r')) content.pop_back();
  return content;
}

RoleCredentials read_container(const RoleCredentialsEndpoint& endpoint) {
  const std::string what = endpoint.describe();
  const std::string authorization =
      endpoint.authorization_file.empty()
          ? endpoint.authorization
          : token_of_file(endpoint.authorization_file, what, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  if (authorization.find_first_of("\r\n") != std::string::npos) {
    throw FetchError({Kind::kOther, 0, what + ": an authorization token of more than one line"});
  }
  std::vector<std::string> headers;
  if (!authorization.empty()) headers.push_back("Authorization: " + authorization);
  const Reply reply = request({endpoint.url, "GET", headers, "", endpoint.timeout, what});
  if (reply.status != 200) throw FetchError({Kind::kOther, 0, what + " (HTTP " + std::to_string(reply.status) + ")"});
  RoleCredentials credentials = parse_credentials(reply.body, what);
  credentials.from = what;
  return credentials;
}

// The text of the first <tag>...</tag> in `xml` ("" when absent).
std::string xml_text(const std::string& xml, const std::string& tag) {
  const size_t open = xml.find("<" + tag + ">");
  if (open == std::string::npos) return "";
  const size_t start = open + tag.size() + 2;
  const size_t close = xml.find("</" + tag + ">", start);
  return close == std::string::npos ? "" : xml.substr(start, close - start);
}

RoleCredentials sts_credentials(const Reply& reply, const char* action, const std::string& what,
                                const std::vector<std::string>& secrets = {});

RoleCredentials read_web_identity(const RoleCredentialsEndpoint& endpoint, const CaCertificates* ca) {
  const std::string what = endpoint.describe();
  const std::string token = token_of_file(endpoint.authorization_file, what, "AWS_WEB_IDENTITY_TOKEN_FILE");
  Request r{endpoint.url + "/", "POST", {"Content-Type: application/x-www-form-urlencoded"}, "",
            endpoint.timeout,   what};
  r.body = "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=" + percent_encoded(endpoint.role_arn, false) +
           "&RoleSessionName=" + percent_encoded(endpoint.session_name, false) +
           "&WebIdentityToken=" + percent_encoded(token, false);
  r.local = false;  // STS is AWS's public endpoint: through the proxy, if any.
  r.ca = ca;
  return sts_credentials(request(r), "AssumeRoleWithWebIdentity", what);
}

RoleCredentials read_assume_role(const RoleCredentialsEndpoint& endpoint, const CaCertificates* ca) {
  const std::string what = endpoint.describe();
  RoleCredentialsEndpoint::SourceKeys source = endpoint.source;
  if (endpoint.source_endpoint != nullptr) {
    // A chain: the source's credentials are read anew for each AssumeRole
    // (they may be a role's, expiring in turn).
    try {
      const RoleCredentials keys = read_role_credentials(*endpoint.source_endpoint, ca);
      source = {keys.access_key_id, keys.secret_access_key, keys.session_token, keys.from};
    } catch (const FetchError& e) {
      if (e.failure().kind == Kind::kCancelled) throw;
      throw FetchError(
          {e.failure().kind, e.failure().status, "role " + endpoint.role_arn + ": " + e.failure().message});
    }
  }
  Request r{endpoint.url + "/", "POST", {"Content-Type: application/x-www-form-urlencoded"}, "",
            endpoint.timeout,   what};
  if (!source.session_token.empty()) r.headers.push_back("x-amz-security-token: " + source.session_token);
  r.body = "Action=AssumeRole&Version=2011-06-15&RoleArn=" + percent_encoded(endpoint.role_arn, false) +
           "&RoleSessionName=" + percent_encoded(endpoint.session_name, false);
  if (!endpoint.external_id.empty()) r.body += "&ExternalId=" + percent_encoded(endpoint.external_id, false);
  if (endpoint.duration_seconds > 0) r.body += "&DurationSeconds=" + std::to_string(endpoint.duration_seconds);
  r.local = false;
  r.ca = ca;
  r.sigv4 = "aws:amz:" + endpoint.region + ":sts";
  r.access_key_id = source.access_key_id;
  r.secret_access_key = source.secret_access_key;
  return sts_credentials(request(r), "AssumeRole", what, {source.session_token, source.secret_access_key});
}

// The credentials in STS's reply to `action`; `secrets`: what the request
// sent that a reply must not echo into a message.
RoleCredentials sts_credentials(const Reply& reply, const char* action, const std::string& what,
                                const std::vector<std::string>& secrets) {
  if (reply.status != 200) {
    // STS's error code (InvalidIdentityToken, AccessDenied...), not its message.
    const std::string code = error_code(xml_text(reply.body, "Code"), secrets);
    throw FetchError(
        {Kind::kOther, 0,
         what + ": " + action + " (HTTP " + std::to_string(reply.status) + (code.empty() ? "" : ", " + code) + ")"});
  }
  const std::string credentials_xml = xml_text(reply.body, "Credentials");
  RoleCredentials credentials;
  const std::pair<std::string*, const char*> fields[] = {{&credentials.access_key_id, "AccessKeyId"},
                                                         {&credentials.secret_access_key, "SecretAccessKey"},
                                                         {&credentials.session_token, "SessionToken"}};
  for (const auto& [field, tag] : fields) {
    *field = xml_text(credentials_xml, tag);
    if (field->empty()) throw FetchError({Kind::kOther, 0, what + ": a reply without " + tag});
  }
  credentials.expiration = parse_expiration(xml_text(credentials_xml, "Expiration"), what);
  credentials.from = what;
  return credentials;
}

// A token `aws sso login` cached: its file, its JSON, when it expires.
struct SsoToken {
  std::filesystem::path path;
  nlohmann::json json;
  std::chrono::system_clock::time_point expires;
};

// Tokens refreshed that their cache file could not take (a read-only
// folder), by file: this process goes on with them (and their refresh
// tokens, which OIDC may have rotated) while they are newer than the file's.
std::mutex unwritten_sso_tokens_mu;
std::map<std::string, SsoToken>& unwritten_sso_tokens() {
  static std::map<std::string, SsoToken> tokens;
  return tokens;
}

std::string utc_text(std::chrono::system_clock::time_point at) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(at);
  char text[32] = {};
  std::tm tm{};
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&seconds, &tm));
  return text;
}

// The newest token `aws sso login` cached for `start_url` in `folder`.
SsoToken newest_sso_token(const std::string& folder, const std::string& start_url, const std::string& what) {
  std::optional<SsoToken> newest;
  std::error_code error;
  // Incremented with an error code: a folder that fails half-way ends the scan, never throws.
  for (std::filesystem::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    const std::filesystem::directory_entry& entry = *it;
    std::error_code size_error;
    if (entry.path().extension() != ".json" || !entry.is_regular_file(size_error) ||
        entry.file_size(size_error) > kMaxSsoCacheFile || size_error) {
      continue;
    }
    std::ifstream file(entry.path());
    std::ostringstream text;
    text << file.rdbuf();
    // Parsed without exceptions: a parse error's message could quote the token.
    const nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, false);
    const auto string_field = [&](const char* name) {
      return json.is_object() && json.contains(name) && json[name].is_string();
    };
    if (!string_field("startUrl") || json["startUrl"] != start_url || !string_field("accessToken") ||
        !string_field("expiresAt")) {
      continue;
    }
    std::chrono::system_clock::time_point expires;
    try {
      expires = parse_expiration(json["expiresAt"].get<std::string>(), what);
    } catch (const FetchError&) {
      continue;  // A time we do not read: another file may hold a good token.
    }
    if (!newest || expires > newest->expires) newest = SsoToken{entry.path(), json, expires};
  }
  {
    std::lock_guard lock(unwritten_sso_tokens_mu);
    for (const auto& [path, token] : unwritten_sso_tokens()) {
      const bool for_it = token.json.contains("startUrl") && token.json["startUrl"] == start_url &&
                          std::filesystem::path(path).parent_path() == std::filesystem::path(folder);
      if (for_it && (!newest || token.expires > newest->expires)) newest = token;
    }
  }
  if (!newest) throw FetchError({Kind::kOther, 0, what + ": no token for it in " + folder + kSsoLogin});
  return std::move(*newest);
}

// Writes `text` over `path` as the AWS CLI writes its cache: a new file
// (readable by its owner only) synced and renamed over it, so that a reader
// sees the old file or the new one. Returns false when it could not (the
// temporary file is then removed).
bool replace_file(const std::filesystem::path& path, const std::string& text) {
  std::random_device random;
  for (int attempt = 0; attempt < 8; ++attempt) {
    const std::string temporary =
        path.string() + "." + std::to_string(::getpid()) + "-" + std::to_string(random()) + ".tmp";
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      return false;
    }
    bool whole = true;
    for (size_t at = 0; whole && at < text.size();) {
      const ssize_t n = ::write(fd, text.data() + at, text.size() - at);
      if (n < 0 && errno == EINTR) continue;
      whole = n > 0;
      if (whole) at += static_cast<size_t>(n);
    }
    whole = ::fsync(fd) == 0 && whole;
    whole = ::close(fd) == 0 && whole;
    if (whole && ::rename(temporary.c_str(), path.c_str()) == 0) return true;
    ::unlink(temporary.c_str());
    return false;
  }
  return false;
}

// Refreshes `token` at SSO OIDC (CreateToken with its refresh token), as
// botocore does, and writes it back to its file so that the AWS CLI and
// other processes use it too (a cache that cannot be written leaves the new
// token to this process). Returns why it cannot be refreshed (the cache
// holds no refresh token: a legacy login; its client's registration
// expired), or nothing once refreshed; throws FetchError ("refreshing it at
// URL: ...", to follow `what`'s message) when OIDC cannot be asked or refuses.
std::optional<std::string> refresh_sso_token(const RoleCredentialsEndpoint& endpoint, SsoToken& token,
                                             const CaCertificates* ca, const std::string& what) {
  const auto text = [&](const char* name) -> std::optional<std::string> {
    if (!token.json.contains(name) || !token.json[name].is_string()) return std::nullopt;
    return token.json[name].get<std::string>();
  };
  const auto refresh_token = text("refreshToken");
  const auto client_id = text("clientId");
  const auto client_secret = text("clientSecret");
  const auto registration_expires = text("registrationExpiresAt");
  if (!refresh_token || !client_id || !client_secret || !registration_expires) {
    return "not refreshed: the cache holds no refresh token (a login without an sso-session)";
  }
  try {
    const auto registered_until = parse_expiration(*registration_expires, what);
    if (registered_until <= std::chrono::system_clock::now()) {
      return "not refreshed: its client registration expired at " + utc_text(registered_until);
    }
  } catch (const FetchError&) {
    return "not refreshed: its client registration's expiry is not a time";
  }
  const std::string url = endpoint.sso_oidc_url + "/token";
  Request r{url,
            "POST",
            {"Content-Type: application/json"},
            nlohmann::json{{"clientId", *client_id},
                           {"clientSecret", *client_secret},
                           {"grantType", "refresh_token"},
                           {"refreshToken", *refresh_token}}
                .dump(),
            endpoint.timeout,
            "refreshing it at " + url};
  r.local = false;  // AWS's public endpoint: through the proxy, if any.
  r.ca = ca;
  const auto now = std::chrono::system_clock::now();
  const Reply reply = request(r);
  const nlohmann::json json = nlohmann::json::parse(reply.body, nullptr, false);
  if (reply.status != 200) {
    // OIDC's error code (invalid_grant, expired_token, ...); never its description.
    const std::string code = json.is_object() && json.contains("error") && json["error"].is_string()
                                 ? error_code(json["error"].get<std::string>(), {*refresh_token, *client_secret})
                                 : std::string();
    throw FetchError(
        {Kind::kOther, 0,
         r.what + ": CreateToken (HTTP " + std::to_string(reply.status) + (code.empty() ? "" : ", " + code) + ")"});
  }
  if (!json.is_object() || !json.contains("accessToken") || !json["accessToken"].is_string() ||
      !json.contains("expiresIn") || !json["expiresIn"].is_number_integer()) {
    throw FetchError({Kind::kOther, 0, r.what + ": a reply without accessToken or expiresIn"});
  }
  // Checked before the cache is written: the AWS CLI reads it too.
  const int64_t seconds = json["expiresIn"].get<int64_t>();
  if (seconds <= 0 || seconds > kMaxSsoTokenSeconds) {
    throw FetchError(
        {Kind::kOther, 0, r.what + ": an expiresIn outside [1, " + std::to_string(kMaxSsoTokenSeconds) + "] seconds"});
  }
  const std::string access_token = json["accessToken"].get<std::string>();
  if (access_token.empty() || access_token.find_first_of(std::string("\r\n\0", 3)) != std::string::npos) {
    throw FetchError({Kind::kOther, 0, r.what + ": an accessToken that is not one line of text"});
  }
  token.json["accessToken"] = access_token;
  token.expires = now + std::chrono::seconds(seconds);
  token.json["expiresAt"] = utc_text(token.expires);
  if (json.contains("refreshToken") && json["refreshToken"].is_string())
    token.json["refreshToken"] = json["refreshToken"];
  if (!replace_file(token.path, token.json.dump())) {
    // Kept here instead: its refresh token may be the only valid one now.
    std::lock_guard lock(unwritten_sso_tokens_mu);
    unwritten_sso_tokens()[token.path.string()] = token;
  }
  return std::nullopt;
}

// The token to send for `endpoint`'s start URL: the newest cached, refreshed
// first when it expires within kSsoRefreshWindow and can be.
std::string sso_token(const RoleCredentialsEndpoint& endpoint, const CaCertificates* ca, const std::string& what) {
  const std::string& folder = endpoint.authorization_file;
  SsoToken token = newest_sso_token(folder, endpoint.sso_start_url, what);
  const auto now = std::chrono::system_clock::now();
  if (token.expires - now < kSsoRefreshWindow) {
    std::string failure;
    try {
      if (auto why = refresh_sso_token(endpoint, token, ca, what)) failure = "; " + *why;
    } catch (const FetchError& e) {
      failure = "; " + e.failure().message;  // A token still valid is used meanwhile.
    }
    if (token.expires <= now) {
      throw FetchError(
          {Kind::kOther, 0,
           what + ": its token in " + folder + " expired at " + utc_text(token.expires) + failure + kSsoLogin});
    }
  }
  const std::string access_token = token.json["accessToken"].get<std::string>();
  if (access_token.find_first_of("\r\n") != std::string::npos) {
    throw FetchError({Kind::kOther, 0, what + ": a token of more than one line in " + folder});
  }
  return access_token;
}

RoleCredentials read_sso(const RoleCredentialsEndpoint& endpoint, const CaCertificates* ca) {
  const std::string what = endpoint.describe();
  const std::string token = sso_token(endpoint, ca, what);
  Request r{endpoint.url, "GET", {"x-amz-sso_bearer_token: " + token}, "", endpoint.timeout, what};
  r.local = false;  // The portal is AWS's public endpoint: through the proxy, if any.
  r.ca = ca;
  const Reply reply = request(r);
  if (reply.status != 200) {
    const bool refused = reply.status == 401 || reply.status == 403;
    throw FetchError(
        {Kind::kOther, 0,
         what + ": GetRoleCredentials (HTTP " + std::to_string(reply.status) + ")" + (refused ? kSsoLogin : "")});
  }
  const nlohmann::json json = nlohmann::json::parse(reply.body, nullptr, false);
  const nlohmann::json* role =
      json.is_object() && json.contains("roleCredentials") ? &json["roleCredentials"] : nullptr;
  const auto field = [&](const char* name) -> std::string {
    if (role == nullptr || !role->is_object() || !role->contains(name) || !(*role)[name].is_string()) {
      throw FetchError({Kind::kOther, 0, what + ": a reply without roleCredentials." + name});
    }
    return (*role)[name].get<std::string>();
  };
  RoleCredentials credentials;
  credentials.access_key_id = field("accessKeyId");
  credentials.secret_access_key = field("secretAccessKey");
  credentials.session_token = field("sessionToken");
  if (!role->contains("expiration") || !(*role)["expiration"].is_number_integer()) {
    throw FetchError({Kind::kOther, 0, what + ": a reply without roleCredentials.expiration"});
  }
  // Milliseconds since 1970.
  credentials.expiration =
      std::chrono::system_clock::time_point(std::chrono::milliseconds((*role)["expiration"].get<int64_t>()));
  credentials.from = what;
  return credentials;
}

}  // namespace

namespace {

// Output beyond this from a credential_process is not credentials.
constexpr size_t kMaxProcessOutput = 1 << 20;

// The first line of `text`, at most 200 characters: what a failed process
// said, for its error.
std::string first_line(const std::string& text) {
  const size_t start = text.find_first_not_of(" \t\r\n");
  if (start == std::string::npos) return {};
  std::string line = text.substr(start, text.find_first_of("\r\n", start) - start);
  if (line.size() > 200) line = line.substr(0, 200) + "...";
  return line;
}

struct ProcessResult {
  int status = 0;  // As waitpid() gives it.
  std::string out;
  std::string err;
};

// Runs `words` (the program found on PATH) with this process's environment,
// /dev/null for standard input and SIGPIPE at its default (Python ignores
// it, and an ignored signal stays ignored across exec); collects its
// standard output and error until it exits, killing it past `timeout`
// seconds or kMaxProcessOutput bytes, or when the calling thread's
// Cancellation is cancelled (kCancelled: a stopping loader does not wait for
// it). It stays in this process group, as the AWS CLI leaves it, so that a
// helper may still prompt on the terminal. Throws FetchError named by `what`.
ProcessResult run_process(const std::vector<std::string>& words, double timeout, const std::string& what) {
  const Cancellation* cancellation = current_cancellation();
  const auto cancelled = [&] { return cancellation != nullptr && cancellation->cancelled(); };
  if (cancelled()) throw FetchError({Kind::kCancelled, 0, what + ": cancelled"});
  struct Pipe {
    int fds[2] = {-1, -1};
    ~Pipe() {
      for (const int fd : fds) {
        if (fd >= 0) ::close(fd);
      }
    }
    void close_end(int end) {
      ::close(fds[end]);
      fds[end] = -1;
    }
  } out, err;
  if (::pipe2(out.fds, O_CLOEXEC) != 0 || ::pipe2(err.fds, O_CLOEXEC) != 0) {
    throw FetchError({Kind::kOther, 0, what + ": cannot make a pipe: " + std::strerror(errno)});
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out.fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err.fds[1], 2);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t signals;
  sigemptyset(&signals);
  posix_spawnattr_setsigmask(&attributes, &signals);
  sigaddset(&signals, SIGPIPE);
  posix_spawnattr_setsigdefault(&attributes, &signals);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> argv;
  for (const std::string& word : words) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, argv[0], &actions, &attributes, argv.data(), environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    throw FetchError({Kind::kOther, 0, what + ": cannot run " + words[0] + ": " + std::strerror(spawned)});
  }
  // Killed and reaped however this function ends, unless it exited.
  struct Child {
    pid_t pid;
    bool reaped = false;
    int status = 0;
    bool exited() {
      const pid_t done = ::waitpid(pid, &status, WNOHANG);
      // ECHILD: reaped elsewhere (SIGCHLD ignored); judged by its output.
      if (done == pid || (done < 0 && errno == ECHILD)) reaped = true;
      return reaped;
    }
    ~Child() {
      if (reaped) return;
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
  } child{pid};
  out.close_end(1);
  err.close_end(1);
  ProcessResult result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  // Until it exits, not only until it closes its output: a helper that
  // closes both and hangs is killed at the deadline as any other.
  while (out.fds[0] >= 0 || err.fds[0] >= 0 || !child.exited()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0)
      throw FetchError({Kind::kTimeout, 0, what + ": no answer within " + format_shortest(timeout) + " s"});
    pollfd fds[2] = {{out.fds[0], POLLIN, 0}, {err.fds[0], POLLIN, 0}};
    // Waits of 50 ms at most: a cancellation, or the exit once the pipes
    // are closed, is seen within that.
    if (::poll(fds, 2, static_cast<int>(std::min<int64_t>(left, 50))) < 0 && errno != EINTR) {
      throw FetchError({Kind::kOther, 0, what + ": poll: " + std::strerror(errno)});
    }
    if (cancelled()) throw FetchError({Kind::kCancelled, 0, what + ": cancelled"});
    for (auto [pipe, text] : {std::pair{&out, &result.out}, std::pair{&err, &result.err}}) {
      const size_t index = pipe == &out ? 0 : 1;
      if (pipe->fds[0] < 0 || (fds[index].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buffer[4096];
      const ssize_t got = ::read(pipe->fds[0], buffer, sizeof buffer);
      if (got > 0) {
        text->append(buffer, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        pipe->close_end(0);
      }
    }
    if (result.out.size() > kMaxProcessOutput || result.err.size() > kMaxProcessOutput) {
      throw FetchError(
          {Kind::kOther, 0, what + ": more than " + std::to_string(kMaxProcessOutput) + " bytes of output"});
    }
  }
  result.status = child.status;
  return result;
}

// A profile's credential_process, run; its output's credentials.
RoleCredentials read_process(const RoleCredentialsEndpoint& endpoint) {
  const std::string what = endpoint.describe();
  const ProcessResult run = run_process(endpoint.command, endpoint.timeout, what);
  if (!WIFEXITED(run.status) || WEXITSTATUS(run.status) != 0) {
    // What it said, without its arguments (they may hold a secret, and a
    // usage message may repeat them).
    std::string said = first_line(run.err);
    for (size_t i = 1; i < endpoint.command.size(); ++i) {
      const std::string& word = endpoint.command[i];
      for (size_t at; !word.empty() && (at = said.find(word)) != std::string::npos;)
        said.replace(at, word.size(), "...");
    }
    throw FetchError({Kind::kOther, 0,
                      what + ": " +
                          (WIFEXITED(run.status) ? "exited with status " + std::to_string(WEXITSTATUS(run.status))
                                                 : "killed by signal " + std::to_string(WTERMSIG(run.status))) +
                          (said.empty() ? "" : " (" + said + ")")});
  }
  // Parsed without exceptions: a parse error's message could quote the secret.
  const nlohmann::json json = nlohmann::json::parse(run.out, nullptr, false);
  if (!json.is_object()) throw FetchError({Kind::kOther, 0, what + ": its output is not a JSON object"});
  if (!json.contains("Version") || json["Version"] != 1) {
    throw FetchError({Kind::kOther, 0, what + ": its output's Version is not 1"});
  }
  const auto field = [&](const char* name, bool required) -> std::string {
    if (json.contains(name) && json[name].is_string()) return json[name].get<std::string>();
    if (required || (json.contains(name) && !json[name].is_null())) {
      throw FetchError({Kind::kOther, 0, what + ": its output has no " + name + " string"});
    }
    return {};
  };
  RoleCredentials credentials;
  credentials.from = what;
  credentials.access_key_id = field("AccessKeyId", true);
  credentials.secret_access_key = field("SecretAccessKey", true);
  credentials.session_token = field("SessionToken", false);
  const std::string expiration = field("Expiration", false);
  credentials.expiration = expiration.empty() ? std::chrono::system_clock::time_point::max()  // Long-term keys.
                                              : parse_expiration(expiration, what);
  return credentials;
}

}  // namespace

std::vector<std::string> split_command_line(std::string_view command) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < command.size(); ++i) {
    const char c = command[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\\') {
      check_config(i + 1 < command.size(), "credential_process ends with a backslash");
      word += command[++i];
    } else if (c == '\'') {
      const size_t end = command.find('\'', i + 1);
      check_config(end != std::string_view::npos, "credential_process has an unterminated ' quote");
      word.append(command.substr(i + 1, end - i - 1));
      i = end;
    } else if (c == '"') {
      for (++i;; ++i) {
        check_config(i < command.size(), "credential_process has an unterminated \" quote");
        if (command[i] == '"') break;
        if (command[i] == '\\' && i + 1 < command.size() && (command[i + 1] == '"' || command[i + 1] == '\\')) ++i;
        word += command[i];
      }
    } else {
      word += c;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

RoleCredentialsEndpoint process_endpoint(const std::string& profile, const std::string& command) {
  RoleCredentialsEndpoint endpoint;
  endpoint.command = split_command_line(command);
  check_config(!endpoint.command.empty(), "profile '" + profile + "' has an empty credential_process");
  endpoint.kind = RoleCredentialsEndpoint::Kind::kProcess;
  endpoint.profile = profile;
  endpoint.timeout = kProcessTimeoutSeconds;
  return endpoint;
}

std::string RoleCredentialsEndpoint::describe() const {
  switch (kind) {
    case Kind::kWebIdentity:
      return "web identity (role " + role_arn + ", through STS at " + url + ")";
    case Kind::kContainer:
      return "the container credentials endpoint at " + url;
    case Kind::kSso:
      return "IAM Identity Center (" + sso_start_url + ", through the portal at " + url + ")";
    case Kind::kAssumeRole:
      return "role " + role_arn + ", assumed with " +
             (source_endpoint != nullptr ? "the credentials of (" + source_endpoint->describe() + ")"
                                         : "the keys of " + source.from) +
             " through STS at " + url;
    case Kind::kProcess:
      // The program only: its arguments may hold a secret.
      return "credential_process of profile '" + profile + "' (" + (command.empty() ? "" : command.front()) + ")";
    case Kind::kInstanceMetadata:
      break;
  }
  return "the instance metadata service at " + url;
}

std::string aws_service_url(const std::string& service, const std::string& region) {
  return "https://" + service + "." + region + (region.rfind("cn-", 0) == 0 ? ".amazonaws.com.cn" : ".amazonaws.com");
}

RoleCredentialsEndpoint sso_endpoint(const SsoProfile& profile, const GetEnv& getenv) {
  const std::pair<const std::string*, const char*> required[] = {{&profile.start_url, "sso_start_url"},
                                                                 {&profile.region, "sso_region"},
                                                                 {&profile.account_id, "sso_account_id"},
                                                                 {&profile.role_name, "sso_role_name"}};
  for (const auto& [value, name] : required) {
    check_config(!value->empty(), std::string("an IAM Identity Center (SSO) profile needs ") + name);
  }
  RoleCredentialsEndpoint endpoint;
  endpoint.kind = RoleCredentialsEndpoint::Kind::kSso;
  endpoint.timeout = 5.0;  // AWS's portal over the network, as STS.
  endpoint.sso_start_url = profile.start_url;
  const std::string base = without_trailing_slashes(
      nonempty(getenv("AWS_ENDPOINT_URL_SSO")).value_or(aws_service_url("portal.sso", profile.region)));
  endpoint.url = base + "/federation/credentials?account_id=" + percent_encoded(profile.account_id, false) +
                 "&role_name=" + percent_encoded(profile.role_name, false);
  endpoint.authorization_file = getenv("HOME").value_or("") + "/.aws/sso/cache";
  endpoint.sso_oidc_url = without_trailing_slashes(
      nonempty(getenv("AWS_ENDPOINT_URL_SSO_OIDC")).value_or(aws_service_url("oidc", profile.region)));
  return endpoint;
}

namespace {

// The session name the SDKs make when none is given.
std::string default_session_name() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return "conveyor-" + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count());
}

// STS's URL for `region` (empty: the global endpoint), unless the
// environment names one.
std::string sts_url(const GetEnv& getenv, const std::string& region) {
  std::optional<std::string> url = nonempty(getenv("AWS_ENDPOINT_URL_STS"));
  if (!url) url = nonempty(getenv("AWS_ENDPOINT_URL"));
  return without_trailing_slashes(
      url.value_or(region.empty() ? "https://sts.amazonaws.com" : aws_service_url("sts", region)));
}

}  // namespace

RoleCredentialsEndpoint assume_role_endpoint(const AssumeRoleProfile& profile, const GetEnv& getenv) {
  RoleCredentialsEndpoint endpoint;
  endpoint.kind = RoleCredentialsEndpoint::Kind::kAssumeRole;
  endpoint.timeout = 5.0;  // STS over the network.
  endpoint.role_arn = profile.role_arn;
  endpoint.session_name = profile.session_name.empty() ? default_session_name() : profile.session_name;
  endpoint.external_id = profile.external_id;
  endpoint.source = profile.source;
  if (!profile.duration_seconds.empty()) {
    int64_t seconds = 0;
    const char* text = profile.duration_seconds.c_str();
    const auto [end, ec] = std::from_chars(text, text + profile.duration_seconds.size(), seconds);
    check_config(ec == std::errc() && *end == '\0' && seconds >= 900 && seconds <= 43200,
                 "profile '" + profile.name +
                     "': duration_seconds must be a whole number of seconds in [900, 43200], got '" +
                     profile.duration_seconds + "'");
    endpoint.duration_seconds = seconds;
  }
  endpoint.url = sts_url(getenv, profile.region);
  endpoint.region = profile.region.empty() ? "us-east-1" : profile.region;
  return endpoint;
}

std::optional<RoleCredentialsEndpoint> web_identity_endpoint(const GetEnv& getenv) {
  const auto variable = [&](const char* name) { return nonempty(getenv(name)); };
  const auto token_file = variable("AWS_WEB_IDENTITY_TOKEN_FILE");
  const auto role_arn = variable("AWS_ROLE_ARN");
  if (!token_file || !role_arn) return std::nullopt;
  RoleCredentialsEndpoint endpoint;
  endpoint.kind = RoleCredentialsEndpoint::Kind::kWebIdentity;
  endpoint.timeout = 5.0;  // STS over the network.
  endpoint.authorization_file = *token_file;
  endpoint.role_arn = *role_arn;
  endpoint.session_name = variable("AWS_ROLE_SESSION_NAME").value_or(default_session_name());
  std::optional<std::string> region = variable("AWS_REGION");
  if (!region) region = variable("AWS_DEFAULT_REGION");
  endpoint.url = sts_url(getenv, region.value_or(""));
  return endpoint;
}

std::optional<RoleCredentialsEndpoint> role_credentials_endpoint(const GetEnv& getenv) {
  const auto variable = [&](const char* name) { return nonempty(getenv(name)); };
  RoleCredentialsEndpoint endpoint;
  if (const auto relative = variable("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")) {
    endpoint.kind = RoleCredentialsEndpoint::Kind::kContainer;
    endpoint.url = "http://169.254.170.2" + (relative->front() == '/' ? *relative : "/" + *relative);
  } else if (const auto full = variable("AWS_CONTAINER_CREDENTIALS_FULL_URI")) {
    endpoint.kind = RoleCredentialsEndpoint::Kind::kContainer;
    endpoint.url = *full;
    const std::string scheme = ascii_lower(full->substr(0, full->find("://")));
    const std::string host = host_of_url(*full);
    const bool allowed_http = host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1" ||
                              host == "169.254.170.2" || host == "169.254.170.23" || host == "fd00:ec2::23";
    check_config(scheme == "https" || (scheme == "http" && allowed_http),
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI must be https://, or http:// to a loopback address or to ECS's "
                 "or EKS's (169.254.170.2, 169.254.170.23, fd00:ec2::23); got host '" +
                     host + "'");
  }
  // The SDKs' AWS_METADATA_SERVICE_TIMEOUT, for both local endpoints.
  std::optional<double> timeout;
  if (const auto seconds = variable("AWS_METADATA_SERVICE_TIMEOUT")) {
    char* end = nullptr;
    const double value = std::strtod(seconds->c_str(), &end);
    check_config(end != seconds->c_str() && *end == '\0' && std::isfinite(value) && value > 0,
                 "AWS_METADATA_SERVICE_TIMEOUT must be a number of seconds > 0, got '" + *seconds + "'");
    timeout = value;
  }
  if (endpoint.kind == RoleCredentialsEndpoint::Kind::kContainer) {
    endpoint.timeout = timeout.value_or(2.0);
    endpoint.authorization_file = variable("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE").value_or("");
    if (endpoint.authorization_file.empty()) {
      endpoint.authorization = variable("AWS_CONTAINER_AUTHORIZATION_TOKEN").value_or("");
    }
    return endpoint;
  }
  if (ascii_lower(getenv("AWS_EC2_METADATA_DISABLED").value_or("")) == "true") return std::nullopt;
  endpoint.timeout = timeout.value_or(1.0);
  endpoint.url = variable("AWS_EC2_METADATA_SERVICE_ENDPOINT").value_or("http://169.254.169.254");
  while (endpoint.url.size() > 1 && endpoint.url.back() == '/') endpoint.url.pop_back();
  return endpoint;
}

RoleCredentials read_role_credentials(const RoleCredentialsEndpoint& endpoint, const CaCertificates* ca) {
  init_curl_once();
  switch (endpoint.kind) {
    case RoleCredentialsEndpoint::Kind::kWebIdentity:
      return read_web_identity(endpoint, ca);
    case RoleCredentialsEndpoint::Kind::kContainer:
      return read_container(endpoint);
    case RoleCredentialsEndpoint::Kind::kSso:
      return read_sso(endpoint, ca);
    case RoleCredentialsEndpoint::Kind::kProcess:
      return read_process(endpoint);
    case RoleCredentialsEndpoint::Kind::kAssumeRole:
      return read_assume_role(endpoint, ca);
    case RoleCredentialsEndpoint::Kind::kInstanceMetadata:
      break;
  }
  return read_instance_metadata(endpoint.url, endpoint.timeout);
}

RefreshingRoleCredentials::RefreshingRoleCredentials(RoleCredentialsEndpoint endpoint, CaCertificates ca,
                                                     std::chrono::seconds retry_after)
    : endpoint_(std::move(endpoint)), ca_(std::move(ca)), retry_after_(retry_after) {}

bool RefreshingRoleCredentials::fresh(const State& state, std::chrono::system_clock::time_point now) const {
  // Within kRefreshBefore of expiry, valid credentials are read again at
  // most every retry_after_, whether the last read succeeded or failed.
  return state.credentials != nullptr &&
         (state.credentials->expiration - now > kRefreshBefore ||
          (state.credentials->expiration > now &&
           (now - state.read_at < retry_after_ || now - state.failed_at < retry_after_)));
}

bool RefreshingRoleCredentials::none_to_be_had(const State& state, std::chrono::system_clock::time_point now) const {
  // The instance metadata service's first answer is kept; the others are
  // asked again retry_after_ after a failure.
  return state.tried && state.credentials == nullptr &&
         (endpoint_.kind == RoleCredentialsEndpoint::Kind::kInstanceMetadata || now - state.failed_at < retry_after_);
}

std::optional<std::shared_ptr<const RoleCredentials>> RefreshingRoleCredentials::at_hand() const {
  const std::lock_guard lock(state_mu_);
  const auto now = std::chrono::system_clock::now();
  if (fresh(state_, now)) return state_.credentials;
  if (none_to_be_had(state_, now)) return std::shared_ptr<const RoleCredentials>();
  return std::nullopt;
}

std::shared_ptr<const RoleCredentials> RefreshingRoleCredentials::current() {
  const std::lock_guard lock(mu_);
  // Only current() writes state_, under mu_: it reads it without state_mu_.
  const auto now = std::chrono::system_clock::now();
  if (fresh(state_, now)) return state_.credentials;
  if (none_to_be_had(state_, now)) return nullptr;  // No role here (yet): unsigned.
  State next = state_;
  // Kept whichever way the read ends (a failure changes the state too).
  const auto keep = [&] {
    const std::lock_guard state(state_mu_);
    state_ = std::move(next);
  };
  try {
    std::shared_ptr<const RoleCredentials> credentials = read(next, now);
    keep();
    return credentials;
  } catch (...) {
    keep();
    throw;
  }
}

std::shared_ptr<const RoleCredentials> RefreshingRoleCredentials::read(
    State& state, std::chrono::system_clock::time_point now) const {
  if (state.credentials != nullptr && state.credentials->expiration <= now && now - state.failed_at < retry_after_) {
    throw FetchError(
        {Kind::kConnection, 0, "the role's credentials expired and " + state.failure});  // Asked again later.
  }
  try {
    RoleCredentials fetched = read_role_credentials(endpoint_, &ca_);
    if (fetched.expiration <= now) {
      // Used, they would be read again at every request.
      throw FetchError({Kind::kOther, 0,
                        endpoint_.describe() + ": credentials that expired at " + utc_text(fetched.expiration) +
                            ", before they were read (is this machine's clock right?)"});
    }
    state.credentials = std::make_shared<const RoleCredentials>(std::move(fetched));
    state.read_at = now;
  } catch (const FetchError& e) {
    // A stopping loader's: not a failure of the endpoint.
    if (e.failure().kind == Kind::kCancelled) throw;
    state.failure = e.failure().message;
    state.failed_at = now;
    if (state.credentials == nullptr) {
      state.tried = true;
      return nullptr;
    }
    if (state.credentials->expiration > now) return state.credentials;  // Still valid.
    throw FetchError({Kind::kConnection, 0, "the role's credentials expired and " + e.failure().message});
  }
  state.tried = true;
  return state.credentials;
}

std::string RefreshingRoleCredentials::source() const {
  const std::lock_guard lock(state_mu_);
  if (state_.credentials != nullptr) return state_.credentials->from;
  if (!state_.tried) return endpoint_.describe();
  return state_.failure;
}

}  // namespace conveyor
