#include "conveyor/io/instance_credentials.h"

#include <gtest/gtest.h>

#include <string>

#include "conveyor/io/remote.h"
#include "conveyor/io/testing/http_test_server.h"

namespace conveyor {
namespace {

using detail::HttpTestConnection;
using detail::HttpTestRequest;
using detail::HttpTestServer;

// The message of read_instance_credentials' failure against a service whose
// role's credentials are `body`.
std::string failure_with(const std::string& body) {
  HttpTestServer server([&](const HttpTestRequest& request, HttpTestConnection& connection) {
    if (request.method == "PUT") return connection.send(HttpTestServer::reply(200, "OK", "SESSION"));
    if (request.target == "/latest/meta-data/iam/security-credentials/") {
      return connection.send(HttpTestServer::reply(200, "OK", "trainer\n"));
    }
    return connection.send(HttpTestServer::reply(200, "OK", body));
  });
  try {
    read_instance_credentials(server.url(""));
  } catch (const FetchError& e) {
    EXPECT_EQ(e.failure().message.find("SECRET"), std::string::npos) << e.failure().message;
    const std::string service = "the instance metadata service at " + server.url("");
    EXPECT_EQ(e.failure().message.rfind(service, 0), 0u) << e.failure().message;
    return e.failure().message.substr(service.size());
  }
  ADD_FAILURE() << "read credentials from " << body;
  return "";
}

TEST(InstanceCredentialsTest, ABadReplyIsNamedWithoutQuotingIt) {
  const std::string prefix = ": the credentials of role trainer: ";
  EXPECT_EQ(failure_with(R"({"AccessKeyId":"ASIA","SecretAccessKey":"SECRET","Expiration":"2030-01-01T00:00:00Z"})"),
            prefix + "a reply without Token");
  EXPECT_EQ(failure_with(R"({"Code":"AssumeRoleUnauthorizedAccess","Message":"no"})"),
            prefix + "Code AssumeRoleUnauthorizedAccess");
  EXPECT_EQ(failure_with(R"({"AccessKeyId":"A","SecretAccessKey":"SECRET","Token":"T","Expiration":"soon"})"),
            prefix + "an Expiration that is not a UTC time ('soon')");
  EXPECT_EQ(failure_with("SECRET not json {"), prefix + "a reply without AccessKeyId");
}

TEST(InstanceCredentialsTest, AnUnreachableServiceFailsAtItsFirstStep) {
  std::string url;
  {
    HttpTestServer closed([](const HttpTestRequest&, HttpTestConnection&) { return false; });
    url = closed.url("");
  }  // Closed: its port refuses connections now.
  try {
    read_instance_credentials(url, 0.5);
    FAIL() << "read credentials from a closed port";
  } catch (const FetchError& e) {
    EXPECT_EQ(e.failure().kind, FetchFailure::Kind::kConnection);
    EXPECT_EQ(e.failure().message.rfind("the instance metadata service at " + url + ": its session token: ", 0), 0u)
        << e.failure().message;
  }
  InstanceCredentials credentials(url, 0.5);
  EXPECT_EQ(credentials.current(), nullptr);
  EXPECT_EQ(credentials.source().rfind("the instance metadata service at " + url + ": its session token: ", 0), 0u);
}

TEST(InstanceCredentialsTest, TheServiceIsFoundAsTheAwsSdksFindIt) {
  const auto env = [](std::map<std::string, std::string> variables) {
    return [variables](const std::string& name) -> std::optional<std::string> {
      const auto it = variables.find(name);
      return it == variables.end() ? std::nullopt : std::optional(it->second);
    };
  };
  EXPECT_EQ(instance_metadata_endpoint(env({})), "http://169.254.169.254");
  EXPECT_EQ(instance_metadata_endpoint(env({{"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:8/"}})),
            "http://127.0.0.1:8");
  EXPECT_EQ(instance_metadata_endpoint(env({{"AWS_EC2_METADATA_DISABLED", "TRUE"}})), std::nullopt);
  EXPECT_EQ(instance_metadata_endpoint(env({{"AWS_EC2_METADATA_DISABLED", "false"}})), "http://169.254.169.254");
}

}  // namespace
}  // namespace conveyor
