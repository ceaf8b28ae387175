#include "conveyor/io/role_credentials.h"

#include <curl/curl.h>

#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>

#include "conveyor/core/error.h"
#include "conveyor/io/remote.h"

namespace conveyor {

namespace {

using Kind = FetchFailure::Kind;

// Replies of the metadata service are small; more is not one.
constexpr size_t kMaxReply = 64 << 10;
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

// One request to the service; throws FetchError naming `step` (never a header's value).
Reply request(const std::string& url, const char* method, const std::string& header, double timeout,
              const std::string& what) {
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
  if (!header.empty()) {
    cleanup.headers = curl_slist_append(nullptr, header.c_str());
    if (cleanup.headers == nullptr) throw std::bad_alloc();
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, cleanup.headers);
  }
  Reply reply;
  char error[CURL_ERROR_SIZE] = {};
  const long milliseconds = static_cast<long>(timeout * 1000);
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(easy, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, milliseconds);
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, milliseconds);
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &reply.body);
  const CURLcode code = curl_easy_perform(easy);
  if (code != CURLE_OK) {
    const Kind kind = code == CURLE_OPERATION_TIMEDOUT ? Kind::kTimeout : Kind::kConnection;
    throw FetchError({kind, 0, what + ": " + (error[0] != '\0' ? std::string(error) : curl_easy_strerror(code))});
  }
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &reply.status);
  return reply;
}

std::chrono::system_clock::time_point parse_expiration(const std::string& text, const std::string& what) {
  std::tm tm{};
  char zone = '\0';
  // "2026-11-27T14:00:00Z"
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &zone) != 7 ||
      zone != 'Z') {
    throw FetchError({Kind::kOther, 0, what + ": an Expiration that is not a UTC time ('" + text.substr(0, 40) + "')"});
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

}  // namespace

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
      throw Error(ErrorKind::kConfig, "libcurl failed to initialise (curl_global_init)");
    }
  });
}

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

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// The host of an http(s) URL, lower-cased, without brackets or port.
std::string host_of_url(const std::string& url) {
  const size_t start = url.find("://") == std::string::npos ? 0 : url.find("://") + 3;
  const size_t end = url.find_first_of("/?#", start);
  std::string authority = url.substr(start, end == std::string::npos ? std::string::npos : end - start);
  if (const size_t at = authority.rfind('@'); at != std::string::npos) authority = authority.substr(at + 1);
  if (!authority.empty() && authority[0] == '[') return lower(authority.substr(1, authority.find(']') - 1));
  return lower(authority.substr(0, authority.find(':')));
}

RoleCredentials read_instance_metadata(const std::string& endpoint, double timeout) {
  const std::string service = "the instance metadata service at " + endpoint;
  std::string token_header;
  const Reply token = request(endpoint + "/latest/api/token", "PUT", "X-aws-ec2-metadata-token-ttl-seconds: 21600",
                              timeout, service + ": its session token");
  if (token.status == 200 && !token.body.empty()) {
    token_header = "X-aws-ec2-metadata-token: " + token.body;
  } else if (token.status != 403 && token.status != 404 && token.status != 405) {
    throw FetchError({Kind::kOther, 0, service + ": its session token (HTTP " + std::to_string(token.status) + ")"});
  }
  const std::string roles_url = endpoint + "/latest/meta-data/iam/security-credentials/";
  const Reply roles = request(roles_url, "GET", token_header, timeout, service + ": the instance's role");
  if (roles.status != 200 || roles.body.empty()) {
    throw FetchError({Kind::kOther, 0,
                      service + ": the instance's role (HTTP " + std::to_string(roles.status) +
                          (roles.status == 404 ? ": the instance has no role" : "") + ")"});
  }
  const std::string role = roles.body.substr(0, roles.body.find_first_of("\r\n"));
  const std::string what = service + ": the credentials of role " + role;
  const Reply reply = request(roles_url + role, "GET", token_header, timeout, what);
  if (reply.status != 200) throw FetchError({Kind::kOther, 0, what + " (HTTP " + std::to_string(reply.status) + ")"});
  RoleCredentials credentials = parse_credentials(reply.body, what);
  credentials.from = "the instance metadata service (role " + role + ")";
  return credentials;
}

RoleCredentials read_container(const RoleCredentialsEndpoint& endpoint, double timeout) {
  const std::string what = endpoint.describe();
  std::string authorization = endpoint.authorization;
  if (!endpoint.authorization_file.empty()) {
    std::ifstream file(endpoint.authorization_file);
    std::ostringstream text;
    text << file.rdbuf();
    if (!file) {
      throw FetchError(
          {Kind::kOther, 0,
           what + ": AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE " + endpoint.authorization_file + " cannot be read"});
    }
    authorization = text.str();
    while (!authorization.empty() && (authorization.back() == '\n' || authorization.back() == '\r')) {
      authorization.pop_back();
    }
  }
  if (authorization.find_first_of("\r\n") != std::string::npos) {
    throw FetchError({Kind::kOther, 0, what + ": an authorization token of more than one line"});
  }
  const Reply reply =
      request(endpoint.url, "GET", authorization.empty() ? "" : "Authorization: " + authorization, timeout, what);
  if (reply.status != 200) throw FetchError({Kind::kOther, 0, what + " (HTTP " + std::to_string(reply.status) + ")"});
  RoleCredentials credentials = parse_credentials(reply.body, what);
  credentials.from = what;
  return credentials;
}

}  // namespace

std::string RoleCredentialsEndpoint::describe() const {
  return (kind == Kind::kContainer ? "the container credentials endpoint at " : "the instance metadata service at ") +
         url;
}

std::optional<RoleCredentialsEndpoint> role_credentials_endpoint(const GetEnv& getenv) {
  const auto nonempty = [&](const char* name) -> std::optional<std::string> {
    auto value = getenv(name);
    return value && !value->empty() ? value : std::nullopt;
  };
  RoleCredentialsEndpoint endpoint;
  if (const auto relative = nonempty("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")) {
    endpoint.kind = RoleCredentialsEndpoint::Kind::kContainer;
    endpoint.url = "http://169.254.170.2" + (relative->front() == '/' ? *relative : "/" + *relative);
  } else if (const auto full = nonempty("AWS_CONTAINER_CREDENTIALS_FULL_URI")) {
    endpoint.kind = RoleCredentialsEndpoint::Kind::kContainer;
    endpoint.url = *full;
    const std::string scheme = lower(full->substr(0, full->find("://")));
    const std::string host = host_of_url(*full);
    const bool allowed_http = host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1" ||
                              host == "169.254.170.2" || host == "169.254.170.23" || host == "fd00:ec2::23";
    check_config(scheme == "https" || (scheme == "http" && allowed_http),
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI must be https://, or http:// to a loopback address or to ECS's "
                 "or EKS's (169.254.170.2, 169.254.170.23, fd00:ec2::23); got host '" +
                     host + "'");
  }
  if (endpoint.kind == RoleCredentialsEndpoint::Kind::kContainer) {
    endpoint.authorization_file = nonempty("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE").value_or("");
    if (endpoint.authorization_file.empty()) {
      endpoint.authorization = nonempty("AWS_CONTAINER_AUTHORIZATION_TOKEN").value_or("");
    }
    return endpoint;
  }
  if (lower(getenv("AWS_EC2_METADATA_DISABLED").value_or("")) == "true") return std::nullopt;
  endpoint.url = nonempty("AWS_EC2_METADATA_SERVICE_ENDPOINT").value_or("http://169.254.169.254");
  while (endpoint.url.size() > 1 && endpoint.url.back() == '/') endpoint.url.pop_back();
  return endpoint;
}

RoleCredentials read_role_credentials(const RoleCredentialsEndpoint& endpoint, double timeout) {
  init_curl_once();
  return endpoint.kind == RoleCredentialsEndpoint::Kind::kContainer ? read_container(endpoint, timeout)
                                                                    : read_instance_metadata(endpoint.url, timeout);
}

RefreshingRoleCredentials::RefreshingRoleCredentials(RoleCredentialsEndpoint endpoint)
    : endpoint_(std::move(endpoint)) {}

std::shared_ptr<const RoleCredentials> RefreshingRoleCredentials::current() {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::system_clock::now();
  if (credentials_ != nullptr && credentials_->expiration - now > kRefreshBefore) return credentials_;
  if (tried_ && credentials_ == nullptr) return nullptr;  // No role here: unsigned.
  // The SDKs' timeouts: off EC2 nothing answers the metadata service.
  const double timeout = endpoint_.kind == RoleCredentialsEndpoint::Kind::kContainer ? 2.0 : 1.0;
  try {
    credentials_ = std::make_shared<const RoleCredentials>(read_role_credentials(endpoint_, timeout));
  } catch (const FetchError& e) {
    if (!tried_) {
      tried_ = true;
      failure_ = e.failure().message;
      return nullptr;
    }
    if (credentials_ != nullptr && credentials_->expiration > now) return credentials_;  // Still valid.
    throw FetchError({Kind::kConnection, 0, "the role's credentials expired and " + e.failure().message});
  }
  tried_ = true;
  return credentials_;
}

std::string RefreshingRoleCredentials::source() const {
  std::lock_guard lock(mu_);
  if (credentials_ != nullptr) return credentials_->from;
  if (!tried_) return endpoint_.describe();
  return failure_;
}

}  // namespace conveyor
