#include "conveyor/io/role_credentials.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>

#include "conveyor/core/cancellation.h"
#include "conveyor/core/error.h"
#include "conveyor/io/remote.h"
#include "conveyor/io/testing/http_test_server.h"
#include "conveyor/io/testing/temp_dir.h"

namespace conveyor {
namespace {

using detail::HttpTestConnection;
using detail::HttpTestRequest;
using detail::HttpTestServer;
using Kind = RoleCredentialsEndpoint::Kind;

GetEnv env(std::map<std::string, std::string> variables) {
  return [variables](const std::string& name) -> std::optional<std::string> {
    const auto it = variables.find(name);
    return it == variables.end() ? std::nullopt : std::optional(it->second);
  };
}

// An endpoint of `kind` at `url`, with a timeout no loaded machine reaches
// for a local server.
RoleCredentialsEndpoint local(Kind kind, std::string url) {
  RoleCredentialsEndpoint endpoint{kind, std::move(url)};
  endpoint.timeout = 60;
  return endpoint;
}

constexpr const char* kCredentials =
    R"({"AccessKeyId":"ASIAROLE","SecretAccessKey":"SECRET","Token":"T","Expiration":"2030-01-01T00:00:00Z"})";

// The message of the metadata service's failure when the role's
// credentials are `body`, after "the instance metadata service at URL".
std::string failure_with(const std::string& body) {
  HttpTestServer server([&](const HttpTestRequest& request, HttpTestConnection& connection) {
    if (request.method == "PUT") return connection.send(HttpTestServer::reply(200, "OK", "SESSION"));
    if (request.target == "/latest/meta-data/iam/security-credentials/") {
      return connection.send(HttpTestServer::reply(200, "OK", "trainer\n"));
    }
    return connection.send(HttpTestServer::reply(200, "OK", body));
  });
  try {
    read_role_credentials(local(Kind::kInstanceMetadata, server.url("")));
  } catch (const FetchError& e) {
    EXPECT_EQ(e.failure().message.find("SECRET"), std::string::npos) << e.failure().message;
    const std::string service = "the instance metadata service at " + server.url("");
    EXPECT_EQ(e.failure().message.rfind(service, 0), 0u) << e.failure().message;
    return e.failure().message.substr(service.size());
  }
  ADD_FAILURE() << "read credentials from " << body;
  return "";
}

TEST(RoleCredentialsTest, ABadReplyIsNamedWithoutQuotingIt) {
  const std::string prefix = ": the credentials of role trainer: ";
  EXPECT_EQ(failure_with(R"({"AccessKeyId":"ASIA","SecretAccessKey":"SECRET","Expiration":"2030-01-01T00:00:00Z"})"),
            prefix + "a reply without Token");
  EXPECT_EQ(failure_with(R"({"Code":"AssumeRoleUnauthorizedAccess","Message":"no"})"),
            prefix + "Code AssumeRoleUnauthorizedAccess");
  EXPECT_EQ(failure_with(R"({"AccessKeyId":"A","SecretAccessKey":"SECRET","Token":"T","Expiration":"soon"})"),
            prefix + "an Expiration that is not a UTC time");
  EXPECT_EQ(failure_with("SECRET not json {"), prefix + "a reply without AccessKeyId");
  EXPECT_EQ(failure_with(std::string(70000, ' ')), prefix + "a reply of more than 65536 bytes");
}

TEST(RoleCredentialsTest, CredentialsThatExpiredBeforeTheyWereReadAreAFailedReadAskedAgainLater) {
  // Found by hostile probing: with this machine's clock ahead, such
  // credentials were read again at every request.
  std::atomic<int> reads{0};
  HttpTestServer container([&](const HttpTestRequest&, HttpTestConnection& connection) {
    ++reads;
    return connection.send(HttpTestServer::reply(
        200, "OK", R"({"AccessKeyId":"ASIA","SecretAccessKey":"S","Token":"T","Expiration":"2000-01-01T00:00:00Z"})"));
  });
  RefreshingRoleCredentials credentials(local(Kind::kContainer, container.url("/creds")), {},
                                        std::chrono::seconds(3600));
  EXPECT_EQ(credentials.current(), nullptr);
  EXPECT_EQ(credentials.current(), nullptr);
  EXPECT_EQ(reads.load(), 1);
  EXPECT_EQ(credentials.source(), "the container credentials endpoint at " + container.url("/creds") +
                                      ": credentials that expired at 2000-01-01T00:00:00Z, before they were read (is "
                                      "this machine's clock right?)");
}

TEST(RoleCredentialsTest, AnUnreachableServiceFailsAtItsFirstStepOnce) {
  std::string url;
  {
    HttpTestServer closed([](const HttpTestRequest&, HttpTestConnection&) { return false; });
    url = closed.url("");
  }  // Closed: its port refuses connections now.
  try {
    read_role_credentials(local(Kind::kInstanceMetadata, url));  // Refused at once.
    FAIL() << "read credentials from a closed port";
  } catch (const FetchError& e) {
    EXPECT_EQ(e.failure().kind, FetchFailure::Kind::kConnection);
    EXPECT_EQ(e.failure().message.rfind("the instance metadata service at " + url + ": its session token: ", 0), 0u)
        << e.failure().message;
  }
  RefreshingRoleCredentials credentials(local(Kind::kInstanceMetadata, url));
  EXPECT_EQ(credentials.source(), "the instance metadata service at " + url);
  EXPECT_EQ(credentials.current(), nullptr);
  EXPECT_EQ(credentials.current(), nullptr);
  EXPECT_EQ(credentials.source().rfind("the instance metadata service at " + url + ": its session token: ", 0), 0u);
  // A role assumed with those credentials names itself, then the source
  // that failed; STS is not asked.
  RoleCredentialsEndpoint role = assume_role_endpoint({"p", "arn:r", "s", "", "", "", {}}, env({}));
  role.url = url;
  role.source_endpoint = std::make_shared<const RoleCredentialsEndpoint>(local(Kind::kInstanceMetadata, url));
  try {
    read_role_credentials(role);
    FAIL() << "assumed a role without its source's credentials";
  } catch (const FetchError& e) {
    EXPECT_EQ(e.failure().kind, FetchFailure::Kind::kConnection);
    EXPECT_EQ(
        e.failure().message.rfind("role arn:r: the instance metadata service at " + url + ": its session token: ", 0),
        0u)
        << e.failure().message;
  }
}

TEST(RoleCredentialsTest, TheEndpointIsFoundAsTheAwsSdksFindIt) {
  const auto found = [](std::map<std::string, std::string> variables) {
    const std::optional<RoleCredentialsEndpoint> endpoint = role_credentials_endpoint(env(std::move(variables)));
    return endpoint ? endpoint->describe() + (endpoint->authorization.empty() ? "" : " with a token") +
                          (endpoint->authorization_file.empty() ? "" : " from " + endpoint->authorization_file)
                    : "none";
  };
  EXPECT_EQ(found({}), "the instance metadata service at http://169.254.169.254");
  EXPECT_EQ(found({{"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:8/"}}),
            "the instance metadata service at http://127.0.0.1:8");
  EXPECT_EQ(found({{"AWS_EC2_METADATA_DISABLED", "TRUE"}}), "none");
  // The SDKs' timeouts, and theirs to set.
  EXPECT_EQ(role_credentials_endpoint(env({}))->timeout, 1.0);
  EXPECT_EQ(role_credentials_endpoint(env({{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/c"}}))->timeout, 2.0);
  EXPECT_EQ(role_credentials_endpoint(env({{"AWS_METADATA_SERVICE_TIMEOUT", "7.5"}}))->timeout, 7.5);
  EXPECT_THROW(role_credentials_endpoint(env({{"AWS_METADATA_SERVICE_TIMEOUT", "soon"}})), Error);
  EXPECT_EQ(found({{"AWS_EC2_METADATA_DISABLED", "false"}}), "the instance metadata service at http://169.254.169.254");
  // A container's endpoint comes first (ECS: relative to 169.254.170.2).
  EXPECT_EQ(found({{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc"}}),
            "the container credentials endpoint at http://169.254.170.2/v2/credentials/abc");
  EXPECT_EQ(found({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://169.254.170.23/v1/credentials"},
                   {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "tok"},
                   {"AWS_EC2_METADATA_DISABLED", "true"}}),
            "the container credentials endpoint at http://169.254.170.23/v1/credentials with a token");
  EXPECT_EQ(found({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://[fd00:ec2::23]/v1/credentials"},
                   {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "tok"},
                   {"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "/var/run/token"}}),
            "the container credentials endpoint at http://[fd00:ec2::23]/v1/credentials from /var/run/token");
  EXPECT_EQ(found({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "https://creds.example.com/x"}}),
            "the container credentials endpoint at https://creds.example.com/x");
  try {
    role_credentials_endpoint(env({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://creds.example.com:80/x"}}));
    FAIL() << "took plain http to another host";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(e.cause(),
              "AWS_CONTAINER_CREDENTIALS_FULL_URI must be https://, or http:// to a loopback address or to ECS's or "
              "EKS's (169.254.170.2, 169.254.170.23, fd00:ec2::23); got host 'creds.example.com'");
  }
}

class ContainerCredentialsTest : public detail::TempDirTest {};

TEST_F(ContainerCredentialsTest, AreReadWithTheAuthorizationTokenOfItsFile) {
  HttpTestServer server([](const HttpTestRequest& request, HttpTestConnection& connection) {
    const auto authorization = request.headers.find("authorization");
    if (request.target != "/creds" || authorization == request.headers.end() || authorization->second != "TOKEN") {
      return connection.send(HttpTestServer::reply(401, "Unauthorized", ""));
    }
    return connection.send(HttpTestServer::reply(200, "OK", kCredentials));
  });
  std::ofstream(dir_ / "token") << "TOKEN\n";
  RoleCredentialsEndpoint endpoint = local(Kind::kContainer, server.url("/creds"));
  endpoint.authorization_file = (dir_ / "token").string();
  const RoleCredentials credentials = read_role_credentials(endpoint);
  EXPECT_EQ(credentials.access_key_id, "ASIAROLE");
  EXPECT_EQ(credentials.session_token, "T");
  EXPECT_EQ(credentials.from, "the container credentials endpoint at " + server.url("/creds"));
  // A wrong token: refused, named without the token.
  endpoint.authorization_file.clear();
  endpoint.authorization = "WRONG";
  try {
    read_role_credentials(endpoint);
    FAIL() << "read with a wrong token";
  } catch (const FetchError& e) {
    EXPECT_EQ(e.failure().message, "the container credentials endpoint at " + server.url("/creds") + " (HTTP 401)");
  }
}

TEST_F(ContainerCredentialsTest, EksWebIdentityIsExchangedAtStsForTheRolesCredentials) {
  std::string body_seen;
  HttpTestServer sts([&](const HttpTestRequest& request, HttpTestConnection& connection) {
    EXPECT_EQ(request.method, "POST");
    EXPECT_EQ(request.headers.at("content-type"), "application/x-www-form-urlencoded");
    body_seen = request.body;
    return connection.send(
        HttpTestServer::reply(200, "OK",
                              "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
                              "<SessionToken>ROLETOKEN</SessionToken><SecretAccessKey>SECRET</SecretAccessKey>"
                              "<Expiration>2030-01-01T00:00:00.250Z</Expiration><AccessKeyId>ASIAROLE</AccessKeyId>"
                              "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"));
  });
  std::ofstream(dir_ / "token") << "eyJ.token+/=\n";
  const std::optional<RoleCredentialsEndpoint> endpoint =
      web_identity_endpoint(env({{"AWS_WEB_IDENTITY_TOKEN_FILE", (dir_ / "token").string()},
                                 {"AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/trainer"},
                                 {"AWS_ROLE_SESSION_NAME", "job 7"},
                                 {"AWS_ENDPOINT_URL_STS", sts.url("")}}));
  ASSERT_TRUE(endpoint.has_value());
  const RoleCredentials credentials = read_role_credentials(*endpoint);
  EXPECT_EQ(credentials.access_key_id, "ASIAROLE");
  EXPECT_EQ(credentials.secret_access_key, "SECRET");
  EXPECT_EQ(credentials.session_token, "ROLETOKEN");
  EXPECT_EQ(credentials.from,
            "web identity (role arn:aws:iam::123456789012:role/trainer, through STS at " + sts.url("") + ")");
  EXPECT_EQ(std::chrono::system_clock::to_time_t(credentials.expiration), 1893456000);  // 2030-01-01.
  EXPECT_EQ(body_seen,
            "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2F"
            "trainer&RoleSessionName=job%207&WebIdentityToken=eyJ.token%2B%2F%3D");
}

TEST_F(ContainerCredentialsTest, StsRefusingTheTokenIsNamedByItsCode) {
  HttpTestServer sts([](const HttpTestRequest&, HttpTestConnection& connection) {
    return connection.send(HttpTestServer::reply(
        400, "Bad Request",
        "<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>token eyJ.secret expired</Message>"
        "</Error></ErrorResponse>"));
  });
  std::ofstream(dir_ / "token") << "eyJ.secret";
  RoleCredentialsEndpoint endpoint = local(Kind::kWebIdentity, sts.url(""));
  endpoint.authorization_file = (dir_ / "token").string();
  endpoint.role_arn = "arn:r";
  endpoint.session_name = "s";
  try {
    read_role_credentials(endpoint);
    FAIL() << "STS refused the token";
  } catch (const FetchError& e) {
    EXPECT_EQ(e.failure().message, "web identity (role arn:r, through STS at " + sts.url("") +
                                       "): AssumeRoleWithWebIdentity (HTTP 400, InvalidIdentityToken)");
  }
  endpoint.authorization_file = (dir_ / "absent").string();
  try {
    read_role_credentials(endpoint);
    FAIL() << "read a missing token file";
  } catch (const FetchError& e) {
    EXPECT_EQ(e.failure().message, "web identity (role arn:r, through STS at " + sts.url("") +
                                       "): AWS_WEB_IDENTITY_TOKEN_FILE " + endpoint.authorization_file +
                                       " cannot be read");
  }
}

TEST_F(ContainerCredentialsTest, AnSsoProfilesNewestCachedTokenIsExchangedAtThePortal) {
  std::string token_seen, target_seen;
  HttpTestServer portal([&](const HttpTestRequest& request, HttpTestConnection& connection) {
    target_seen = request.target;
    const auto token = request.headers.find("x-amz-sso_bearer_token");
    token_seen = token == request.headers.end() ? "" : token->second;
    if (token_seen != "NEWEST") return connection.send(HttpTestServer::reply(401, "Unauthorized", "bad NEWEST"));
    return connection.send(HttpTestServer::reply(
        200, "OK",
        R"({"roleCredentials":{"accessKeyId":"ASIASSO","secretAccessKey":"SECRET","sessionToken":"T",)"
        R"("expiration":1893456000000}})"));
  });
  const std::filesystem::path cache = dir_ / "cache";
  std::filesystem::create_directories(cache);
  const std::string start = "https://corp.awsapps.com/start";
  auto cached = [&](const std::string& name, const std::string& url, const std::string& token,
                    const std::string& expires) {
    std::ofstream(cache / name) << R"({"startUrl":")" << url << R"(","region":"eu-west-1","accessToken":")" << token
                                << R"(","expiresAt":")" << expires << R"("})";
  };
  cached("a.json", start, "OLD", "2099-01-01T00:00:00UTC");  // An older CLI's form.
  cached("b.json", start, "NEWEST", "2099-06-01T00:00:00.500Z");
  cached("c.json", "https://other.awsapps.com/start", "OTHER", "2100-01-01T00:00:00Z");
  std::ofstream(cache / "botocore-client-id-eu-west-1.json") << R"({"clientId":"x","clientSecret":"y"})";
  std::ofstream(cache / "torn.json") << "{\"startUrl\": \"" << start;
  const RoleCredentialsEndpoint endpoint =
      sso_endpoint({start, "eu-west-1", "123456789012", "Read Only"},
                   env({{"AWS_ENDPOINT_URL_SSO", portal.url("")}, {"HOME", "/nonexistent"}}));
  RoleCredentialsEndpoint here = endpoint;
  here.authorization_file = cache.string();
  here.timeout = 60;
  const RoleCredentials credentials = read_role_credentials(here);
  EXPECT_EQ(token_seen, "NEWEST");
  EXPECT_EQ(target_seen, "/federation/credentials?account_id=123456789012&role_name=Read%20Only");
  EXPECT_EQ(credentials.access_key_id, "ASIASSO");
  EXPECT_EQ(credentials.secret_access_key, "SECRET");
  EXPECT_EQ(credentials.session_token, "T");
  EXPECT_EQ(std::chrono::system_clock::to_time_t(credentials.expiration), 1893456000);  // 2030-01-01.
  EXPECT_EQ(credentials.from, "IAM Identity Center (" + start + ", through the portal at " + endpoint.url + ")");
  EXPECT_EQ(endpoint.authorization_file, "/nonexistent/.aws/sso/cache");

  const std::string what = credentials.from + ": ";
  auto failure = [&] {
    try {
      read_role_credentials(here);
    } catch (const FetchError& e) {
      EXPECT_EQ(e.failure().message.find("NEWEST"), std::string::npos) << e.failure().message;
      EXPECT_EQ(e.failure().message.rfind(what, 0), 0u) << e.failure().message;
      return e.failure().message.substr(what.size());
    }
    return std::string("read");
  };
  // The portal refuses the token (revoked): named without it.
  cached("b.json", start, "REVOKED", "2099-06-01T00:00:00Z");
  EXPECT_EQ(failure(), "GetRoleCredentials (HTTP 401) (run `aws sso login`)");
  // Every token for the start URL expired, or none was cached.
  cached("a.json", start, "OLD", "2020-01-01T00:00:00Z");
  cached("b.json", start, "NEWEST", "2021-03-04T05:06:07Z");
  EXPECT_EQ(failure(), "its token in " + cache.string() +
                           " expired at 2021-03-04T05:06:07Z; not refreshed: the cache holds no refresh token (a login "
                           "without an sso-session) (run `aws sso login`)");
  std::filesystem::remove(cache / "a.json");
  std::filesystem::remove(cache / "b.json");
  EXPECT_EQ(failure(), "no token for it in " + cache.string() + " (run `aws sso login`)");

  // A store's credentials: unsigned until the user logs in, then read at the next retry.
  RefreshingRoleCredentials refreshing(here, {}, std::chrono::seconds(0));
  EXPECT_EQ(refreshing.current(), nullptr);
  EXPECT_EQ(refreshing.source(), what + "no token for it in " + cache.string() + " (run `aws sso login`)");
  cached("b.json", start, "NEWEST", "2099-06-01T00:00:00Z");
  ASSERT_NE(refreshing.current(), nullptr);
  EXPECT_EQ(refreshing.current()->access_key_id, "ASIASSO");
}

TEST_F(ContainerCredentialsTest, AnSsoTokenAboutToExpireIsRefreshedWithItsRefreshTokenAndWrittenBackAsTheCliDoes) {
  // `aws sso login` with an sso-session caches a refresh token and its
  // client's registration: the token is refreshed at SSO OIDC before it
  // expires, so that a job outlives it.
  std::string portal_accepts = "FRESH", oidc_error, oidc_reply;
  std::vector<std::string> portal_saw;
  HttpTestServer portal([&](const HttpTestRequest& request, HttpTestConnection& connection) {
    portal_saw.push_back(request.headers.at("x-amz-sso_bearer_token"));
    if (portal_saw.back() != portal_accepts) return connection.send(HttpTestServer::reply(401, "Unauthorized", ""));
    return connection.send(HttpTestServer::reply(
        200, "OK",
        R"({"roleCredentials":{"accessKeyId":"ASIASSO","secretAccessKey":"SECRET","sessionToken":"T",)"
        R"("expiration":1893456000000}})"));
  });
  std::vector<std::string> oidc_saw;
  HttpTestServer oidc([&](const HttpTestRequest& request, HttpTestConnection& connection) {
    oidc_saw.push_back(request.method + " " + request.target + " " + request.body);
    EXPECT_EQ(request.headers.at("content-type"), "application/json");
    if (!oidc_error.empty()) {
      return connection.send(HttpTestServer::reply(
          400, "Bad Request", R"({"error":")" + oidc_error + R"(","error_description":"REFRESH is CSECRET's"})"));
    }
    if (!oidc_reply.empty()) return connection.send(HttpTestServer::reply(200, "OK", oidc_reply));
    return connection.send(HttpTestServer::reply(
        200, "OK", R"({"accessToken":"FRESH","expiresIn":28800,"refreshToken":"ROTATED","tokenType":"Bearer"})"));
  });
  const std::filesystem::path cache = dir_ / "cache";
  std::filesystem::create_directories(cache);
  const std::string start = "https://corp.awsapps.com/start";
  const auto in = [](std::chrono::seconds from_now) {
    const std::time_t at = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now() + from_now);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&at));
    return std::string(text);
  };
  const auto cache_token = [&](const std::string& expires, const std::string& registration_expires) {
    std::ofstream(cache / "d033e22a.json")
        << R"({"startUrl":")" << start << R"(","region":"eu-west-1","accessToken":"STALE","expiresAt":")" << expires
        << R"(","clientId":"CID","clientSecret":"CSECRET","registrationExpiresAt":")" << registration_expires
        << R"(","refreshToken":"REFRESH"})";
  };
  const auto cached = [&] {
    std::ifstream file(cache / "d033e22a.json");
    return nlohmann::json::parse(file);
  };
  RoleCredentialsEndpoint here =
      sso_endpoint({start, "eu-west-1", "1", "ml"},
                   env({{"AWS_ENDPOINT_URL_SSO", portal.url("")}, {"AWS_ENDPOINT_URL_SSO_OIDC", oidc.url("/")}}));
  EXPECT_EQ(here.sso_oidc_url, oidc.url(""));
  here.authorization_file = cache.string();
  here.timeout = 60;
  const std::string year_on = in(std::chrono::hours(24 * 365));

  // Five minutes left: refreshed first, then sent; the cache holds the new token.
  cache_token(in(std::chrono::minutes(5)), year_on);
  EXPECT_EQ(read_role_credentials(here).access_key_id, "ASIASSO");
  EXPECT_EQ(oidc_saw,
            (std::vector<std::string>{"POST /token "
                                      R"({"clientId":"CID","clientSecret":"CSECRET","grantType":"refresh_token",)"
                                      R"("refreshToken":"REFRESH"})"}));
  EXPECT_EQ(portal_saw, std::vector<std::string>{"FRESH"});
  nlohmann::json written = cached();
  EXPECT_EQ(written["accessToken"], "FRESH");
  EXPECT_EQ(written["refreshToken"], "ROTATED");
  EXPECT_EQ(written["clientId"], "CID");  // What the CLI needs next time is kept.
  EXPECT_EQ(written["registrationExpiresAt"], year_on);
  const std::string expires = written["expiresAt"];
  EXPECT_GE(expires, in(std::chrono::hours(8) - std::chrono::minutes(1)));
  EXPECT_LE(expires, in(std::chrono::hours(8) + std::chrono::minutes(1)));
  EXPECT_EQ(std::filesystem::status(cache / "d033e22a.json").permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(cache), std::filesystem::directory_iterator()), 1);

  // An hour left: sent as it is.
  oidc_saw.clear();
  portal_saw.clear();
  portal_accepts = "STALE";
  cache_token(in(std::chrono::hours(1)), year_on);
  EXPECT_EQ(read_role_credentials(here).access_key_id, "ASIASSO");
  EXPECT_TRUE(oidc_saw.empty());

  // Expired a day ago, its registration valid: refreshed, then sent.
  portal_accepts = "FRESH";
  cache_token(in(-std::chrono::hours(24)), year_on);
  EXPECT_EQ(read_role_credentials(here).access_key_id, "ASIASSO");
  EXPECT_EQ(oidc_saw.size(), 1u);
  EXPECT_EQ(cached()["accessToken"], "FRESH");
  oidc_saw.clear();
  portal_accepts = "STALE";

  // Five minutes left and OIDC refuses: the token still valid is sent.
  oidc_error = "invalid_grant";
  cache_token(in(std::chrono::minutes(5)), year_on);
  EXPECT_EQ(read_role_credentials(here).access_key_id, "ASIASSO");
  EXPECT_EQ(oidc_saw.size(), 1u);
  EXPECT_EQ(cached()["accessToken"], "STALE");

  // A reply the cache must not take: refused before the file is written.
  cache_token(in(std::chrono::minutes(5)), year_on);
  for (const std::string& reply : {std::string(R"({"accessToken":"FRESH","expiresIn":9223372036854775807})"),
                                   std::string(R"({"accessToken":"FR\nESH","expiresIn":60})")}) {
    oidc_reply = reply;
    EXPECT_EQ(read_role_credentials(here).access_key_id, "ASIASSO");  // The token still valid, meanwhile.
    EXPECT_EQ(cached()["accessToken"], "STALE");
  }
  oidc_reply.clear();

  // Expired, and OIDC refuses: named, with its error code, without a secret.
  const std::string what =
      "IAM Identity Center (" + start + ", through the portal at " + here.url + "): its token in " + cache.string();
  const auto failure = [&] {
    try {
      read_role_credentials(here);
    } catch (const FetchError& e) {
      for (const char* secret : {"STALE", "REFRESH", "CSECRET", "CID"}) {
        EXPECT_EQ(e.failure().message.find(secret), std::string::npos) << e.failure().message;
      }
      return e.failure().message;
    }
    return std::string("read");
  };
  cache_token("2021-03-04T05:06:07Z", year_on);
  EXPECT_EQ(failure(), what + " expired at 2021-03-04T05:06:07Z; refreshing it at " + oidc.url("") +
                           "/token: CreateToken (HTTP 400, invalid_grant) (run `aws sso login`)");
  oidc_error = "REFRESH";  // What was sent: not repeated.
  EXPECT_EQ(failure(), what + " expired at 2021-03-04T05:06:07Z; refreshing it at " + oidc.url("") +
                           "/token: CreateToken (HTTP 400) (run `aws sso login`)");
  oidc_error = "bad code!";  // Not a word: not repeated.
  EXPECT_EQ(failure(), what + " expired at 2021-03-04T05:06:07Z; refreshing it at " + oidc.url("") +
                           "/token: CreateToken (HTTP 400) (run `aws sso login`)");
  // Expired with its client's registration: not refreshed (the CLI logs in anew).
  oidc_saw.clear();
  cache_token("2021-03-04T05:06:07Z", "2021-03-04T05:06:07Z");
  EXPECT_EQ(failure(), what +
                           " expired at 2021-03-04T05:06:07Z; not refreshed: its client registration expired at "
                           "2021-03-04T05:06:07Z (run `aws sso login`)");
  EXPECT_TRUE(oidc_saw.empty());
}

TEST(RoleCredentialsTest, WebIdentityIsFoundAsTheAwsSdksFindIt) {
  const auto url = [](std::map<std::string, std::string> variables) {
    variables.emplace("AWS_WEB_IDENTITY_TOKEN_FILE", "/t");
    const auto endpoint = web_identity_endpoint(env(std::move(variables)));
    return endpoint ? endpoint->url + " " + endpoint->session_name.substr(0, 9) : "none";
  };
  EXPECT_EQ(url({}), "none");  // No role: the SDKs need both.
  EXPECT_EQ(url({{"AWS_ROLE_ARN", "arn:r"}}), "https://sts.amazonaws.com conveyor-");
  EXPECT_EQ(url({{"AWS_ROLE_ARN", "arn:r"}, {"AWS_DEFAULT_REGION", "eu-west-1"}}),
            "https://sts.eu-west-1.amazonaws.com conveyor-");
  EXPECT_EQ(
      url({{"AWS_ROLE_ARN", "arn:r"}, {"AWS_REGION", "us-west-2"}, {"AWS_ENDPOINT_URL", "http://10.0.0.1:4566/"}}),
      "http://10.0.0.1:4566 conveyor-");
  EXPECT_EQ(url({{"AWS_ROLE_ARN", "arn:r"},
                 {"AWS_ENDPOINT_URL", "http://a"},
                 {"AWS_ENDPOINT_URL_STS", "http://b"},
                 {"AWS_ROLE_SESSION_NAME", "run-42"}}),
            "http://b run-42");
}

TEST(RoleCredentialsTest, ACommandLineSplitsAsAShellSplitsItWithoutExpandingAnything) {
  using Words = std::vector<std::string>;
  EXPECT_EQ(split_command_line("  /usr/bin/vault-creds --role  ml\t$HOME "),
            (Words{"/usr/bin/vault-creds", "--role", "ml", "$HOME"}));
  EXPECT_EQ(split_command_line("a 'b c' \"d \\\"e\\\" \\\\ \\$ \\n\" f\\ g '' h'i'\"j\"\r\nk"),
            (Words{"a", "b c", R"(d "e" \ \$ \n)", "f g", "", "hij", "k"}));
  EXPECT_EQ(split_command_line("   "), Words{});
  for (const auto& [line, message] :
       std::vector<std::pair<std::string, std::string>>{{"a 'b", "credential_process has an unterminated ' quote"},
                                                        {"a \"b", "credential_process has an unterminated \" quote"},
                                                        {"a\\", "credential_process ends with a backslash"}}) {
    try {
      split_command_line(line);
      FAIL() << line;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
}

class ProcessCredentialsTest : public detail::TempDirTest {
 protected:
  // An endpoint running the shell script `script` (its arguments after it).
  // Lines in the file at `path` (a helper's runs, one line each).
  static std::ptrdiff_t lines_in(const std::filesystem::path& path) {
    std::ifstream in(path);
    return std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n');
  }
  RoleCredentialsEndpoint script(const std::string& body, const std::string& arguments = "") {
    const std::filesystem::path path = dir_ / ("creds-" + std::to_string(scripts_++) + ".sh");
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return process_endpoint("tool", "'" + path.string() + "' " + arguments);
  }
  // read_role_credentials' failure, which must not show `secret`.
  std::string failure(const RoleCredentialsEndpoint& endpoint, FetchFailure::Kind kind = FetchFailure::Kind::kOther) {
    try {
      read_role_credentials(endpoint);
      ADD_FAILURE() << "no error";
      return {};
    } catch (const FetchError& e) {
      EXPECT_EQ(e.failure().kind, kind);
      EXPECT_EQ(e.failure().message.find("SECRETKEY"), std::string::npos) << e.failure().message;
      return e.failure().message;
    }
  }
  int scripts_ = 0;
};

TEST_F(ProcessCredentialsTest, AProfilesCredentialProcessIsRunAndItsOutputRead) {
  const RoleCredentialsEndpoint temporary = script(
      R"(test "$1" = "--role ml" && test -n "$PATH" && ! read line || exit 3
echo '{"Version": 1, "AccessKeyId": "ASIAPROC", "SecretAccessKey": "SECRETKEY", "SessionToken": "TOKEN",'
echo ' "Expiration": "2030-01-02T03:04:05.678+00:00"}')",
      "'--role ml'");
  const RoleCredentials credentials = read_role_credentials(temporary);  // With this process's environment.
  EXPECT_EQ(credentials.access_key_id, "ASIAPROC");
  EXPECT_EQ(credentials.secret_access_key, "SECRETKEY");
  EXPECT_EQ(credentials.session_token, "TOKEN");
  EXPECT_EQ(std::chrono::system_clock::to_time_t(credentials.expiration), 1893553445);
  EXPECT_EQ(credentials.from, "credential_process of profile 'tool' (" + (dir_ / "creds-0.sh").string() + ")");
  // Long-term keys: no session, no expiration.
  const RoleCredentials keys =
      read_role_credentials(script(R"(echo '{"Version":1,"AccessKeyId":"AKIA","SecretAccessKey":"SECRETKEY"}')"));
  EXPECT_EQ(keys.session_token, "");
  EXPECT_EQ(keys.expiration, std::chrono::system_clock::time_point::max());
}

TEST_F(ProcessCredentialsTest, AFailingOrMalformedProcessIsNamedWithoutItsSecret) {
  const std::string name = "credential_process of profile 'tool' (" + (dir_ / "creds-0.sh").string() + ")";
  EXPECT_EQ(failure(script("echo 'token expired: run vault login' >&2; echo SECRETKEY; exit 2")),
            name + ": exited with status 2 (token expired: run vault login)");
  // Its arguments are not repeated, even when it repeats them.
  EXPECT_EQ(failure(script(R"(echo "usage: helper $1" >&2; exit 2)", "--key=SECRETKEY")),
            "credential_process of profile 'tool' (" + (dir_ / "creds-1.sh").string() +
                "): exited with status 2 (usage: helper ...)");
  EXPECT_EQ(
      failure(script(R"(echo '{"Version":2,"AccessKeyId":"A","SecretAccessKey":"SECRETKEY"}')")),
      "credential_process of profile 'tool' (" + (dir_ / "creds-2.sh").string() + "): its output's Version is not 1");
  EXPECT_NE(
      failure(script(R"(echo '{"Version":1,"AccessKeyId":"A"}')")).find(": its output has no SecretAccessKey string"),
      std::string::npos);
  EXPECT_NE(failure(script("echo SECRETKEY")).find(": its output is not a JSON object"), std::string::npos);
  EXPECT_NE(failure(script("kill -9 $$")).find(": killed by signal 9"), std::string::npos);
  RoleCredentialsEndpoint missing = process_endpoint("tool", "/no/such/helper --flag");
  EXPECT_EQ(failure(missing),
            "credential_process of profile 'tool' (/no/such/helper): cannot run /no/such/helper: "
            "No such file or directory");
  RoleCredentialsEndpoint hung = script("exec sleep 30");
  hung.timeout = 0.2;
  EXPECT_NE(failure(hung, FetchFailure::Kind::kTimeout).find(": no answer within 0.2 s"), std::string::npos);
  // Its output closed, but still running: killed at the deadline too.
  RoleCredentialsEndpoint silent = script("exec sleep 30 >&- 2>&-");
  silent.timeout = 0.2;
  EXPECT_NE(failure(silent, FetchFailure::Kind::kTimeout).find(": no answer within 0.2 s"), std::string::npos);
  try {
    process_endpoint("tool", "  ");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "profile 'tool' has an empty credential_process");
  }
}

TEST_F(ProcessCredentialsTest, AStoppingLoaderDoesNotWaitForTheProcess) {
  // A hung helper is killed at the read's cancellation (the loader's stop),
  // long before its timeout; once cancelled, none is started.
  const std::filesystem::path started = dir_ / "started";
  RoleCredentialsEndpoint hung = script("touch '" + started.string() + "'; exec sleep 30");
  Cancellation stop;
  std::thread stopper([&] {
    // Cancelled once the helper runs (or after 10 s, when the test has failed already).
    for (int i = 0; i < 2000 && !std::filesystem::exists(started); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    stop.cancel();
  });
  {
    const ScopedCancellation scope(stop);
    EXPECT_EQ(failure(hung, FetchFailure::Kind::kCancelled),
              "credential_process of profile 'tool' (" + (dir_ / "creds-0.sh").string() + "): cancelled");
    std::filesystem::remove(started);
    EXPECT_NE(failure(hung, FetchFailure::Kind::kCancelled).find(": cancelled"), std::string::npos);
  }
  stopper.join();
  EXPECT_FALSE(std::filesystem::exists(started));
}

TEST_F(ProcessCredentialsTest, CredentialsAboutToExpireAreReadAgainAtMostEveryRetryInterval) {
  // A helper whose keys expire in 5 minutes, inside the 10 minutes before
  // expiry in which credentials are read again.
  const std::filesystem::path runs = dir_ / "runs";
  const RoleCredentialsEndpoint soon =
      script("echo run >> '" + runs.string() + "'\n" +
             R"(echo "{\"Version\": 1, \"AccessKeyId\": \"ASIA\", \"SecretAccessKey\": \"SECRETKEY\", )" +
             R"(\"Expiration\": \"$(date -u -d '+5 min' +%Y-%m-%dT%H:%M:%SZ)\"}")");
  RefreshingRoleCredentials every_time(soon, {}, std::chrono::seconds(0));
  EXPECT_FALSE(every_time.at_hand().has_value());  // None read yet.
  ASSERT_NE(every_time.current(), nullptr);
  EXPECT_FALSE(every_time.at_hand().has_value());  // Due a read.
  ASSERT_NE(every_time.current(), nullptr);
  EXPECT_EQ(lines_in(runs), 2);
  RefreshingRoleCredentials hourly(soon, {}, std::chrono::seconds(3600));
  ASSERT_NE(hourly.current(), nullptr);
  EXPECT_EQ(hourly.current()->access_key_id, "ASIA");  // Still valid: kept.
  ASSERT_TRUE(hourly.at_hand().has_value() && *hourly.at_hand() != nullptr);
  EXPECT_EQ((*hourly.at_hand())->access_key_id, "ASIA");
  EXPECT_EQ(lines_in(runs), 3);
}

TEST_F(ProcessCredentialsTest, AFailedReadOfCredentialsStillValidKeepsThemAndIsNotRetriedBeforeTheInterval) {
  // Keys that expire in 5 minutes (inside the 10 minutes before expiry in
  // which they are read again) from a helper that fails after its first run.
  const std::filesystem::path runs = dir_ / "runs";
  const std::filesystem::path ran = dir_ / "ran";
  const RoleCredentialsEndpoint failing_later =
      script("echo run >> '" + runs.string() + "'\n[ -e '" + ran.string() + "' ] && { echo down >&2; exit 1; }\n" +
             "touch '" + ran.string() + "'\n" +
             R"(echo "{\"Version\": 1, \"AccessKeyId\": \"ASIA\", \"SecretAccessKey\": \"SECRETKEY\", )" +
             R"(\"Expiration\": \"$(date -u -d '+5 min' +%Y-%m-%dT%H:%M:%SZ)\"}")");
  RefreshingRoleCredentials credentials(failing_later, {}, std::chrono::seconds(3));
  ASSERT_NE(credentials.current(), nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(3100));  // Due a read again.
  ASSERT_NE(credentials.current(), nullptr);                     // It failed: the valid keys are kept ...
  EXPECT_EQ(lines_in(runs), 2);
  // ... and neither read again nor due a read before the interval is over.
  ASSERT_NE(credentials.current(), nullptr);
  EXPECT_EQ(credentials.current()->access_key_id, "ASIA");
  EXPECT_TRUE(credentials.at_hand().has_value() && *credentials.at_hand() != nullptr);
  EXPECT_EQ(lines_in(runs), 2);
}

TEST(RoleCredentialsTest, AssumeRoleSendsTheSourcesSessionAndDurationAndNamesStsRefusal) {
  std::atomic<bool> refuse{false};
  HttpTestServer sts([&](const HttpTestRequest& request, HttpTestConnection& connection) {
    EXPECT_EQ(request.body,
              "Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Ar&RoleSessionName=s&DurationSeconds=3600");
    EXPECT_EQ(request.headers.at("x-amz-security-token"), "SOURCETOKEN");
    const std::string& authorization = request.headers.at("authorization");
    EXPECT_NE(authorization.find("SignedHeaders="), std::string::npos);
    EXPECT_NE(authorization.find("x-amz-security-token"), std::string::npos) << authorization;  // Signed too.
    if (refuse) {
      return connection.send(
          HttpTestServer::reply(403, "Forbidden",
                                "<ErrorResponse><Error><Code>AccessDenied</Code><Message>SOURCESECRET?</Message>"
                                "</Error></ErrorResponse>"));
    }
    return connection.send(HttpTestServer::reply(
        200, "OK",
        "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>ASIA</AccessKeyId>"
        "<SecretAccessKey>ROLESECRET</SecretAccessKey><SessionToken>T</SessionToken>"
        "<Expiration>2030-01-01T00:00:00Z</Expiration></Credentials></AssumeRoleResult></AssumeRoleResponse>"));
  });
  AssumeRoleProfile profile{"p", "arn:r", "s", "", "3600", "", {"ASIASOURCE", "SOURCESECRET", "SOURCETOKEN", "there"}};
  RoleCredentialsEndpoint endpoint = assume_role_endpoint(profile, env({{"AWS_ENDPOINT_URL_STS", sts.url("")}}));
  EXPECT_EQ(endpoint.region, "us-east-1");
  EXPECT_EQ(read_role_credentials(endpoint).access_key_id, "ASIA");
  refuse = true;
  try {
    read_role_credentials(endpoint);
    FAIL() << "no error";
  } catch (const FetchError& e) {
    EXPECT_EQ(e.failure().message, "role arn:r, assumed with the keys of there through STS at " + sts.url("") +
                                       ": AssumeRole (HTTP 403, AccessDenied)");
  }
}

}  // namespace
}  // namespace conveyor
