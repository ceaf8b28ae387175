#include "conveyor/io/role_credentials.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

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
    read_role_credentials({Kind::kInstanceMetadata, server.url("")}, 1.0);
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
            prefix + "an Expiration that is not a UTC time ('soon')");
  EXPECT_EQ(failure_with("SECRET not json {"), prefix + "a reply without AccessKeyId");
}

TEST(RoleCredentialsTest, AnUnreachableServiceFailsAtItsFirstStepOnce) {
  std::string url;
  {
    HttpTestServer closed([](const HttpTestRequest&, HttpTestConnection&) { return false; });
    url = closed.url("");
  }  // Closed: its port refuses connections now.
  try {
    read_role_credentials({Kind::kInstanceMetadata, url}, 0.5);
    FAIL() << "read credentials from a closed port";
  } catch (const FetchError& e) {
    EXPECT_EQ(e.failure().kind, FetchFailure::Kind::kConnection);
    EXPECT_EQ(e.failure().message.rfind("the instance metadata service at " + url + ": its session token: ", 0), 0u)
        << e.failure().message;
  }
  RefreshingRoleCredentials credentials({Kind::kInstanceMetadata, url});
  EXPECT_EQ(credentials.source(), "the instance metadata service at " + url);
  EXPECT_EQ(credentials.current(), nullptr);
  EXPECT_EQ(credentials.current(), nullptr);
  EXPECT_EQ(credentials.source().rfind("the instance metadata service at " + url + ": its session token: ", 0), 0u);
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
  RoleCredentialsEndpoint endpoint{Kind::kContainer, server.url("/creds"), "", (dir_ / "token").string()};
  const RoleCredentials credentials = read_role_credentials(endpoint, 2.0);
  EXPECT_EQ(credentials.access_key_id, "ASIAROLE");
  EXPECT_EQ(credentials.session_token, "T");
  EXPECT_EQ(credentials.from, "the container credentials endpoint at " + server.url("/creds"));
  // A wrong token: refused, named without the token.
  endpoint.authorization_file.clear();
  endpoint.authorization = "WRONG";
  try {
    read_role_credentials(endpoint, 2.0);
    FAIL() << "read with a wrong token";
  } catch (const FetchError& e) {
    EXPECT_EQ(e.failure().message, "the container credentials endpoint at " + server.url("/creds") + " (HTTP 401)");
  }
}

}  // namespace
}  // namespace conveyor
