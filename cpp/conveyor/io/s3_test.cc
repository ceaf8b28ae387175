#include "conveyor/io/s3.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include "conveyor/core/error.h"
#include "conveyor/io/testing/temp_dir.h"

namespace conveyor {
namespace {

class S3ConfigTest : public detail::TempDirTest {
 protected:
  // An environment of `variables` only, with HOME at the test's folder.
  GetEnv env(std::map<std::string, std::string> variables = {}) {
    variables.emplace("HOME", dir_.string());
    return [variables](const std::string& name) -> std::optional<std::string> {
      auto it = variables.find(name);
      return it == variables.end() ? std::nullopt : std::optional(it->second);
    };
  }
  void write(const std::string& name, const std::string& text) {
    std::filesystem::create_directories(dir_ / ".aws");
    std::ofstream(dir_ / ".aws" / name) << text;
  }
};

TEST_F(S3ConfigTest, StorageOptionsWinOverTheEnvironment) {
  const S3Config config = resolve_s3_config(
      {{"key", "AKOPT"}, {"secret", "s3cr3t"}, {"token", "tok"}, {"region", "eu-west-3"}},
      env({{"AWS_ACCESS_KEY_ID", "AKENV"}, {"AWS_SECRET_ACCESS_KEY", "x"}, {"AWS_REGION", "us-west-2"}}));
  EXPECT_EQ(config.access_key_id, "AKOPT");
  EXPECT_EQ(config.secret_access_key, "s3cr3t");
  EXPECT_EQ(config.session_token, "tok");
  EXPECT_EQ(config.region, "eu-west-3");
  EXPECT_EQ(config.endpoint_url, "https://s3.eu-west-3.amazonaws.com");
  EXPECT_FALSE(config.path_style);
  EXPECT_EQ(config.credentials_source, "storage_options");
}

TEST_F(S3ConfigTest, TheEnvironmentComesBeforeTheFiles) {
  write("credentials", "[default]\naws_access_key_id = AKFILE\naws_secret_access_key = f\n");
  const S3Config config = resolve_s3_config({}, env({{"AWS_ACCESS_KEY_ID", "AKENV"},
                                                     {"AWS_SECRET_ACCESS_KEY", "e"},
                                                     {"AWS_SESSION_TOKEN", "t"},
                                                     {"AWS_DEFAULT_REGION", "ap-south-1"},
                                                     {"AWS_ENDPOINT_URL", "http://127.0.0.1:9000/"}}));
  EXPECT_EQ(config.access_key_id, "AKENV");
  EXPECT_EQ(config.session_token, "t");
  EXPECT_EQ(config.region, "ap-south-1");
  EXPECT_EQ(config.endpoint_url, "http://127.0.0.1:9000");
  EXPECT_TRUE(config.path_style);  // A given endpoint: path-style.
  EXPECT_EQ(config.credentials_source, "environment (AWS_ACCESS_KEY_ID)");
}

TEST_F(S3ConfigTest, AProfileIsReadFromTheCredentialsThenTheConfigFile) {
  write("credentials",
        "# keys\n[default]\naws_access_key_id = AKDEF\naws_secret_access_key = d\n\n"
        "[train]\naws_access_key_id=AKTRAIN\naws_secret_access_key=t\naws_session_token = tok\n");
  write("config",
        "[default]\nregion = us-west-1\n[profile train]\nregion = eu-central-1\n"
        "endpoint_url = https://minio.example:9000\ns3 =\n  addressing_style = virtual\n");
  const S3Config train = resolve_s3_config({}, env({{"AWS_PROFILE", "train"}}));
  EXPECT_EQ(train.access_key_id, "AKTRAIN");
  EXPECT_EQ(train.session_token, "tok");
  EXPECT_EQ(train.region, "eu-central-1");
  EXPECT_EQ(train.endpoint_url, "https://minio.example:9000");
  EXPECT_EQ(train.credentials_source, "~/.aws/credentials [train]");
  const S3Config fallback = resolve_s3_config({}, env());
  EXPECT_EQ(fallback.access_key_id, "AKDEF");
  EXPECT_EQ(fallback.region, "us-west-1");
  // A profile named in the options skips the environment's keys.
  const S3Config named =
      resolve_s3_config({{"profile", "train"}}, env({{"AWS_ACCESS_KEY_ID", "AKENV"}, {"AWS_SECRET_ACCESS_KEY", "e"}}));
  EXPECT_EQ(named.access_key_id, "AKTRAIN");
}

TEST_F(S3ConfigTest, KeysInTheConfigFileAreFoundToo) {
  write("config", "[profile ci]\naws_access_key_id = AKCFG\naws_secret_access_key = c\n");
  const S3Config config = resolve_s3_config({{"profile", "ci"}}, env());
  EXPECT_EQ(config.access_key_id, "AKCFG");
  EXPECT_EQ(config.credentials_source, "~/.aws/config [ci]");
}

TEST_F(S3ConfigTest, ProfilesAreNamedAndWrittenAsBotocoreReadsThem) {
  // [profile default], "key: value", a name after several spaces, a tab or
  // in quotes: refused or ignored before, read by boto3.
  write("config",
        "[profile default]\nregion: eu-west-1\naws_access_key_id = AKDEF\naws_secret_access_key = d\n"
        "[profile  two]\nregion = eu-west-2\n[profile\tthree]\nregion = eu-west-3\n"
        "[profile \"my prof\"]\nregion = eu-north-1\n");
  const S3Config fallback = resolve_s3_config({}, env());
  EXPECT_EQ(fallback.region, "eu-west-1");
  EXPECT_EQ(fallback.access_key_id, "AKDEF");
  EXPECT_EQ(fallback.credentials_source, "~/.aws/config [default]");
  EXPECT_EQ(resolve_s3_config({{"profile", "two"}}, env()).region, "eu-west-2");
  EXPECT_EQ(resolve_s3_config({{"profile", "three"}}, env()).region, "eu-west-3");
  EXPECT_EQ(resolve_s3_config({{"profile", "my prof"}}, env()).region, "eu-north-1");
  // Of [default] and [profile default], the later one is the profile, as in botocore.
  write("config", "[default]\nregion = us-west-1\n[profile default]\nregion = eu-west-1\n");
  EXPECT_EQ(resolve_s3_config({}, env()).region, "eu-west-1");
  write("config", "[profile default]\nregion = eu-west-1\n[default]\nregion = us-west-1\n");
  EXPECT_EQ(resolve_s3_config({}, env()).region, "us-west-1");
}

TEST_F(S3ConfigTest, WithoutKeysARolesCredentialsAreReadUnlessTheMetadataServiceIsDisabled) {
  const S3Config config = resolve_s3_config({}, env());
  EXPECT_FALSE(config.anonymous);
  ASSERT_TRUE(config.role_endpoint.has_value());
  EXPECT_EQ(config.role_endpoint->url, "http://169.254.169.254");
  EXPECT_EQ(config.credentials_source, "the instance metadata service at http://169.254.169.254");
  EXPECT_EQ(config.looked_in, "storage_options, AWS_ACCESS_KEY_ID, ~/.aws/credentials and ~/.aws/config [default]");
  EXPECT_EQ(resolve_s3_config({}, env({{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/c"}})).credentials_source,
            "the container credentials endpoint at http://169.254.170.2/v2/c");
  // Keys given: no role is asked.
  EXPECT_FALSE(resolve_s3_config({{"key", "AK"}, {"secret", "S"}}, env()).role_endpoint.has_value());
}

TEST_F(S3ConfigTest, EksWebIdentityComesBeforeTheSharedFilesUnlessAProfileIsNamed) {
  write("credentials", "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = FILESECRET\n");
  const std::map<std::string, std::string> eks{{"AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"},
                                               {"AWS_ROLE_ARN", "arn:aws:iam::1:role/trainer"},
                                               {"AWS_REGION", "eu-west-1"}};
  const S3Config config = resolve_s3_config({}, env(eks));
  EXPECT_EQ(config.credentials_source,
            "web identity (role arn:aws:iam::1:role/trainer, through STS at https://sts.eu-west-1.amazonaws.com)");
  EXPECT_EQ(config.access_key_id, "");
  EXPECT_EQ(resolve_s3_config({{"profile", "default"}}, env(eks)).access_key_id, "FILEKEY");
}

TEST_F(S3ConfigTest, WithoutCredentialsRequestsAreUnsignedAndTheSourceSaysWhereItLooked) {
  const S3Config config = resolve_s3_config({}, env({{"AWS_EC2_METADATA_DISABLED", "True"}}));
  EXPECT_TRUE(config.anonymous);
  EXPECT_FALSE(config.role_endpoint.has_value());
  EXPECT_EQ(config.credentials_source,
            "none found (looked in storage_options, AWS_ACCESS_KEY_ID, ~/.aws/credentials and ~/.aws/config "
            "[default])");
  EXPECT_TRUE(resolve_s3_config({{"anon", "true"}}, env({{"AWS_ACCESS_KEY_ID", "AK"}})).anonymous);
}

TEST_F(S3ConfigTest, BadOptionsAreConfigErrorsNamingTheKey) {
  auto message = [&](const std::map<std::string, std::string>& options) {
    try {
      resolve_s3_config(options, env());
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({{"client_kwargs", "{}"}}),
            "storage_options: unknown key 'client_kwargs' for s3:// (known: key, secret, token, anon, profile, "
            "region, endpoint_url, addressing_style)");
  EXPECT_EQ(message({{"key", "AK"}}), "storage_options: key and secret must be given together");
  EXPECT_EQ(message({{"token", "tok"}}), "storage_options: token needs key and secret (a session's three go together)");
  EXPECT_EQ(message({{"token", "tok"}, {"anon", "true"}}),
            "storage_options: token needs key and secret (a session's three go together)");
  EXPECT_EQ(message({{"anon", "maybe"}}), "storage_options: anon must be true or false, got 'maybe'");
  EXPECT_EQ(message({{"endpoint_url", "minio:9000"}}),
            "storage_options: endpoint_url must start with http:// or https://, got 'minio:9000'");
  EXPECT_EQ(message({{"addressing_style", "dns"}}),
            "storage_options: addressing_style must be 'auto', 'path' or 'virtual', got 'dns'");
  EXPECT_EQ(message({{"profile", "nope"}}),
            "storage_options: profile 'nope' is in neither ~/.aws/credentials nor ~/.aws/config");
}

TEST_F(S3ConfigTest, AProfilesRoleIsAssumedWithItsSourceProfilesKeysAsTheAwsCliDoes) {
  write("credentials", "[base]\naws_access_key_id = AKIABASE\naws_secret_access_key = BASESECRET\n");
  write("config",
        "[profile cross]\nrole_arn = arn:aws:iam::2:role/ml\nsource_profile = base\nregion = eu-west-1\n"
        "role_session_name = trainer\nexternal_id = ext-7\nduration_seconds = 7200\n"
        "aws_access_key_id = AKIAOWN\naws_secret_access_key = OWNSECRET\n"
        "[profile env]\nrole_arn = arn:aws:iam::3:role/ml\ncredential_source = Environment\n"
        "[profile pod]\nrole_arn = arn:aws:iam::4:role/ml\nweb_identity_token_file = /var/run/token\n");
  const S3Config cross = resolve_s3_config({{"profile", "cross"}}, env());
  ASSERT_TRUE(cross.role_endpoint.has_value());  // The role, not the profile's own keys.
  const RoleCredentialsEndpoint& role = *cross.role_endpoint;
  EXPECT_EQ(role.kind, RoleCredentialsEndpoint::Kind::kAssumeRole);
  EXPECT_EQ(role.role_arn, "arn:aws:iam::2:role/ml");
  EXPECT_EQ(role.session_name, "trainer");
  EXPECT_EQ(role.external_id, "ext-7");
  EXPECT_EQ(role.duration_seconds, 7200);
  EXPECT_EQ(role.region, "eu-west-1");
  EXPECT_EQ(role.url, "https://sts.eu-west-1.amazonaws.com");
  EXPECT_EQ(role.source.access_key_id, "AKIABASE");
  EXPECT_EQ(role.source.secret_access_key, "BASESECRET");
  EXPECT_EQ(cross.credentials_source,
            "role arn:aws:iam::2:role/ml, assumed with the keys of ~/.aws/credentials [base] through STS at "
            "https://sts.eu-west-1.amazonaws.com");
  EXPECT_EQ(cross.access_key_id, "");
  const S3Config from_env = resolve_s3_config(
      {{"profile", "env"}},
      env({{"AWS_ACCESS_KEY_ID", "AKIAENV"}, {"AWS_SECRET_ACCESS_KEY", "ENVSECRET"}, {"AWS_SESSION_TOKEN", "T"}}));
  ASSERT_TRUE(from_env.role_endpoint.has_value());
  EXPECT_EQ(from_env.role_endpoint->source.access_key_id, "AKIAENV");
  EXPECT_EQ(from_env.role_endpoint->source.session_token, "T");
  EXPECT_EQ(from_env.role_endpoint->url, "https://sts.amazonaws.com");  // No region: the global endpoint,
  EXPECT_EQ(from_env.role_endpoint->region, "us-east-1");               // signed for us-east-1.
  const S3Config pod = resolve_s3_config({{"profile", "pod"}}, env({{"AWS_REGION", "ap-south-1"}}));
  ASSERT_TRUE(pod.role_endpoint.has_value());
  EXPECT_EQ(pod.role_endpoint->kind, RoleCredentialsEndpoint::Kind::kWebIdentity);
  EXPECT_EQ(pod.role_endpoint->authorization_file, "/var/run/token");
  EXPECT_EQ(pod.role_endpoint->role_arn, "arn:aws:iam::4:role/ml");
  EXPECT_EQ(pod.role_endpoint->url, "https://sts.ap-south-1.amazonaws.com");
}

TEST_F(S3ConfigTest, ARolesSourceMayBeAnotherRoleSsoAProcessOrTheInstancesOrContainersRoleAsInTheAwsCli) {
  write("credentials",
        "[keyed]\naws_access_key_id = AKIAKEYED\naws_secret_access_key = KEYEDSECRET\nrole_arn = arn:keyed\n"
        "source_profile = keyed\n");
  write("config",
        "[profile ml]\nrole_arn = arn:aws:iam::2:role/ml\nsource_profile = hop\nregion = eu-west-1\n"
        "[profile hop]\nrole_arn = arn:aws:iam::1:role/hop\ncredential_source = Ec2InstanceMetadata\n"
        "role_session_name = hopping\n"
        "[profile from-keyed]\nrole_arn = arn:r\nsource_profile = keyed\n"
        "[profile from-sso]\nrole_arn = arn:r\nsource_profile = dev\n"
        "[profile dev]\nsso_session = corp\nsso_account_id = 111\nsso_role_name = Reader\n"
        "[sso-session corp]\nsso_start_url = https://corp.awsapps.com/start\nsso_region = us-east-1\n"
        "[profile from-tool]\nrole_arn = arn:r\nsource_profile = tool\n"
        "[profile tool]\ncredential_process = /usr/bin/vault-creds --secret 's3cr3t'\n"
        "[profile from-pod]\nrole_arn = arn:r\ncredential_source = EcsContainer\n");
  const auto role_of = [&](const std::string& profile, std::map<std::string, std::string> variables = {}) {
    const S3Config config = resolve_s3_config({{"profile", profile}}, env(std::move(variables)));
    EXPECT_EQ(config.access_key_id, "");
    EXPECT_TRUE(config.role_endpoint.has_value());
    return config.role_endpoint.value_or(RoleCredentialsEndpoint{});
  };
  // A chain: ml's role is assumed with hop's, assumed with the instance's.
  const RoleCredentialsEndpoint ml = role_of("ml", {{"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9"}});
  EXPECT_EQ(ml.kind, RoleCredentialsEndpoint::Kind::kAssumeRole);
  EXPECT_EQ(ml.role_arn, "arn:aws:iam::2:role/ml");
  EXPECT_EQ(ml.url, "https://sts.eu-west-1.amazonaws.com");
  ASSERT_NE(ml.source_endpoint, nullptr);
  const RoleCredentialsEndpoint& hop = *ml.source_endpoint;
  EXPECT_EQ(hop.kind, RoleCredentialsEndpoint::Kind::kAssumeRole);
  EXPECT_EQ(hop.role_arn, "arn:aws:iam::1:role/hop");
  EXPECT_EQ(hop.session_name, "hopping");
  EXPECT_EQ(hop.region, "eu-west-1");  // The region of the profile S3 is read with, for every link.
  ASSERT_NE(hop.source_endpoint, nullptr);
  EXPECT_EQ(hop.source_endpoint->kind, RoleCredentialsEndpoint::Kind::kInstanceMetadata);
  EXPECT_EQ(hop.source_endpoint->url, "http://127.0.0.1:9");
  EXPECT_EQ(ml.describe(),
            "role arn:aws:iam::2:role/ml, assumed with the credentials of (role arn:aws:iam::1:role/hop, assumed "
            "with the credentials of (the instance metadata service at http://127.0.0.1:9) through STS at "
            "https://sts.eu-west-1.amazonaws.com) through STS at https://sts.eu-west-1.amazonaws.com");
  // A source profile with keys and a role of its own lends its keys (its
  // role is assumed only when it is read for itself).
  const RoleCredentialsEndpoint from_keyed = role_of("from-keyed");
  EXPECT_EQ(from_keyed.source_endpoint, nullptr);
  EXPECT_EQ(from_keyed.source.access_key_id, "AKIAKEYED");
  EXPECT_EQ(from_keyed.source.from, "~/.aws/credentials [keyed]");
  const RoleCredentialsEndpoint keyed = role_of("keyed");  // Its own source_profile: its own keys.
  EXPECT_EQ(keyed.role_arn, "arn:keyed");
  EXPECT_EQ(keyed.source.access_key_id, "AKIAKEYED");
  const RoleCredentialsEndpoint from_sso = role_of("from-sso");
  ASSERT_NE(from_sso.source_endpoint, nullptr);
  EXPECT_EQ(from_sso.source_endpoint->kind, RoleCredentialsEndpoint::Kind::kSso);
  EXPECT_EQ(from_sso.source_endpoint->sso_start_url, "https://corp.awsapps.com/start");
  const RoleCredentialsEndpoint from_tool = role_of("from-tool");
  ASSERT_NE(from_tool.source_endpoint, nullptr);
  EXPECT_EQ(from_tool.source_endpoint->kind, RoleCredentialsEndpoint::Kind::kProcess);
  EXPECT_EQ(from_tool.describe().find("s3cr3t"), std::string::npos) << from_tool.describe();
  // The instance's role even where a container's endpoint is set; the container's where asked.
  const auto container =
      std::map<std::string, std::string>{{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/creds"},
                                         {"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9"}};
  EXPECT_EQ(role_of("ml", container).source_endpoint->source_endpoint->kind,
            RoleCredentialsEndpoint::Kind::kInstanceMetadata);
  const RoleCredentialsEndpoint from_pod = role_of("from-pod", container);
  ASSERT_NE(from_pod.source_endpoint, nullptr);
  EXPECT_EQ(from_pod.source_endpoint->kind, RoleCredentialsEndpoint::Kind::kContainer);
  EXPECT_EQ(from_pod.source_endpoint->url, "http://169.254.170.2/v2/creds");
}

TEST_F(S3ConfigTest, ARoleWeCannotAssumeIsNamedWithWhatToDoInstead) {
  write("config",
        "[profile nokeys]\nrole_arn = arn:r\nsource_profile = empty\n[profile empty]\nregion = us-west-2\n"
        "[profile mfa]\nrole_arn = arn:r\nsource_profile = empty\nmfa_serial = arn:mfa\n"
        "[profile ec2]\nrole_arn = arn:r\ncredential_source = Ec2InstanceMetadata\n"
        "[profile ecs]\nrole_arn = arn:r\ncredential_source = EcsContainer\n"
        "[profile magic]\nrole_arn = arn:r\ncredential_source = Magic\n"
        "[profile lower]\nrole_arn = arn:r\ncredential_source = ec2instancemetadata\n"
        "[profile self]\nrole_arn = arn:r\nsource_profile = self\n"
        "[profile loop-a]\nrole_arn = arn:a\nsource_profile = loop-b\n"
        "[profile loop-b]\nrole_arn = arn:b\nsource_profile = loop-a\n"
        "[profile noenv]\nrole_arn = arn:r\ncredential_source = Environment\n"
        "[profile long]\nrole_arn = arn:r\ncredential_source = Environment\nduration_seconds = 1h\n"
        "[profile nosource]\nrole_arn = arn:r\n"
        "[profile nowhere]\nrole_arn = arn:r\nsource_profile = missing\n"
        "[profile both]\nrole_arn = arn:r\nsource_profile = empty\ncredential_source = Environment\n"
        "[profile token]\nweb_identity_token_file = /var/run/token\n");
  const auto message = [&](const std::string& profile, const GetEnv& variables) {
    try {
      resolve_s3_config({{"profile", profile}}, variables);
      return std::string("no error");
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      return std::string(e.what());
    }
  };
  const auto export_keys = [](const std::string& profile) {
    return ": export the role's keys (aws configure export-credentials --profile " + profile + " --format env)";
  };
  EXPECT_EQ(message("nokeys", env()),
            "profile 'nokeys': its source_profile 'empty' has no credentials in ~/.aws/credentials and "
            "~/.aws/config (keys, a role_arn, IAM Identity Center or credential_process)");
  EXPECT_EQ(
      message("mfa", env()),
      "profile 'mfa' assumes its role with an MFA code (mfa_serial), which a job cannot type" + export_keys("mfa"));
  EXPECT_EQ(message("ec2", env({{"AWS_EC2_METADATA_DISABLED", "true"}})),
            "profile 'ec2' assumes its role with the instance's role (credential_source = Ec2InstanceMetadata), but "
            "AWS_EC2_METADATA_DISABLED is true");
  EXPECT_EQ(message("ecs", env()),
            "profile 'ecs' assumes its role with the container's role (credential_source = EcsContainer), but "
            "neither AWS_CONTAINER_CREDENTIALS_RELATIVE_URI nor AWS_CONTAINER_CREDENTIALS_FULL_URI is set");
  EXPECT_EQ(message("magic", env()),
            "profile 'magic' assumes its role with credential_source = Magic, which the AWS CLI does not know "
            "(Environment, Ec2InstanceMetadata or EcsContainer)");
  EXPECT_EQ(message("lower", env()),
            "profile 'lower' assumes its role with credential_source = ec2instancemetadata, which the AWS CLI does "
            "not know (Environment, Ec2InstanceMetadata or EcsContainer)");
  EXPECT_EQ(message("self", env()),
            "profile 'self' is its own source_profile but has no keys in ~/.aws/credentials and ~/.aws/config");
  EXPECT_EQ(message("loop-a", env()), "profile 'loop-a': its source_profiles loop: loop-a -> loop-b -> loop-a");
  EXPECT_EQ(message("noenv", env()),
            "profile 'noenv' assumes its role with the environment's keys (credential_source = Environment), but "
            "AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY is not set");
  EXPECT_EQ(message("long", env({{"AWS_ACCESS_KEY_ID", "A"}, {"AWS_SECRET_ACCESS_KEY", "S"}})),
            "profile 'long': duration_seconds must be a whole number of seconds in [900, 43200], got '1h'");
  EXPECT_EQ(message("nosource", env()),
            "profile 'nosource' names a role_arn but none of source_profile, credential_source and "
            "web_identity_token_file");
  EXPECT_EQ(message("nowhere", env()),
            "profile 'nowhere': its source_profile 'missing' is not a profile of ~/.aws/credentials and ~/.aws/config");
  EXPECT_EQ(message("both", env()),
            "profile 'both' has both source_profile and credential_source: the AWS CLI takes one");
  EXPECT_EQ(message("token", env()), "profile 'token' has a web_identity_token_file but no role_arn");
  // A chain deeper than any real one (thousands exhausted the stack).
  std::string deep;
  for (int i = 0; i < 100; ++i) {
    deep += "[profile d" + std::to_string(i) + "]\nrole_arn = arn:r\nsource_profile = d" + std::to_string(i + 1) + "\n";
  }
  write("credentials", "[d100]\naws_access_key_id = A\naws_secret_access_key = S\n");
  write("config", deep);
  EXPECT_EQ(message("d0", env()), "profile 'd0': its source_profiles go 64 deep, more than a chain of roles needs");
}

TEST_F(S3ConfigTest, AValueInBothFilesIsTheCredentialsFilesAsTheAwsCliMergesThem) {
  write("credentials",
        "[base]\naws_access_key_id = AKIABASE\naws_secret_access_key = S\n"
        "[cross]\nrole_arn = arn:from-credentials\n");
  write("config", "[profile cross]\nrole_arn = arn:from-config\nsource_profile = base\n");
  const S3Config cross = resolve_s3_config({{"profile", "cross"}}, env());
  ASSERT_TRUE(cross.role_endpoint.has_value());
  EXPECT_EQ(cross.role_endpoint->role_arn, "arn:from-credentials");
  EXPECT_EQ(cross.role_endpoint->source.access_key_id, "AKIABASE");
}

TEST_F(S3ConfigTest, AProfilesCredentialsAreTakenInBotocoresOrder) {
  // Its role, its IAM Identity Center role, its keys in the credentials
  // file, its credential_process, its keys in the config file.
  write("credentials",
        "[both]\naws_access_key_id = AKIACREDS\naws_secret_access_key = S\n"
        "[half]\naws_access_key_id = AKIAHALF\n"
        "[base]\naws_access_key_id = AKIABASE\naws_secret_access_key = S\n");
  write("config",
        "[profile both]\nsso_start_url = https://corp.awsapps.com/start\nsso_region = us-east-1\n"
        "sso_account_id = 1\nsso_role_name = r\n"
        "[profile late]\ncredential_process = /usr/bin/vault-creds\naws_access_key_id = AKIACONFIG\n"
        "aws_secret_access_key = S\n"
        "[profile pod]\nrole_arn = arn:pod\nweb_identity_token_file = /var/run/token\nmfa_serial = arn:mfa\n"
        "aws_access_key_id = AKIAPOD\naws_secret_access_key = S\n"
        "[profile from-pod]\nrole_arn = arn:r\nsource_profile = pod\n");
  EXPECT_EQ(resolve_s3_config({{"profile", "both"}}, env()).role_endpoint->kind, RoleCredentialsEndpoint::Kind::kSso);
  EXPECT_EQ(resolve_s3_config({{"profile", "late"}}, env()).role_endpoint->kind,
            RoleCredentialsEndpoint::Kind::kProcess);
  // A web identity profile ignores mfa_serial, and lends its web identity
  // (not its keys) as a source, as botocore's profile providers do.
  EXPECT_EQ(resolve_s3_config({{"profile", "pod"}}, env()).role_endpoint->kind,
            RoleCredentialsEndpoint::Kind::kWebIdentity);
  const S3Config from_pod = resolve_s3_config({{"profile", "from-pod"}}, env());
  ASSERT_NE(from_pod.role_endpoint->source_endpoint, nullptr);
  EXPECT_EQ(from_pod.role_endpoint->source_endpoint->kind, RoleCredentialsEndpoint::Kind::kWebIdentity);
  try {
    resolve_s3_config({{"profile", "half"}}, env());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(std::string(e.what()),
              "profile 'half' has an aws_access_key_id but no aws_secret_access_key in ~/.aws/credentials");
  }
  // STS is asked in S3's region, storage_options' first (China's own domain here).
  write("config", "[profile cross]\nrole_arn = arn:r\nsource_profile = base\n");
  EXPECT_EQ(resolve_s3_config({{"profile", "cross"}, {"region", "cn-north-1"}}, env()).role_endpoint->url,
            "https://sts.cn-north-1.amazonaws.com.cn");
}

TEST_F(S3ConfigTest, AProfilesCredentialProcessIsItsCredentialsAfterItsKeys) {
  write("credentials", "[keyed]\naws_access_key_id = AKIAFILE\naws_secret_access_key = FILESECRET\n");
  write("config",
        "[profile tool]\ncredential_process = /usr/bin/vault-creds --role 'ml team'\nregion = eu-west-1\n"
        "[profile keyed]\ncredential_process = /usr/bin/vault-creds\n"
        "[profile broken]\ncredential_process = /usr/bin/vault-creds 'ml\n");
  const S3Config tool = resolve_s3_config({{"profile", "tool"}}, env());
  ASSERT_TRUE(tool.role_endpoint.has_value());
  EXPECT_EQ(tool.role_endpoint->kind, RoleCredentialsEndpoint::Kind::kProcess);
  EXPECT_EQ(tool.role_endpoint->command, (std::vector<std::string>{"/usr/bin/vault-creds", "--role", "ml team"}));
  EXPECT_EQ(tool.credentials_source, "credential_process of profile 'tool' (/usr/bin/vault-creds)");
  EXPECT_EQ(tool.access_key_id, "");
  const S3Config keyed = resolve_s3_config({{"profile", "keyed"}}, env());
  EXPECT_FALSE(keyed.role_endpoint.has_value());
  EXPECT_EQ(keyed.access_key_id, "AKIAFILE");
  try {
    resolve_s3_config({{"profile", "broken"}}, env());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(std::string(e.what()), "profile 'broken': credential_process has an unterminated ' quote");
  }
}

TEST_F(S3ConfigTest, AnSsoProfileGetsItsRolesCredentialsFromThePortalAsTheAwsCliDoes) {
  write("config",
        "[profile dev]\nsso_session = corp\nsso_account_id = 123456789012\nsso_role_name = Read Only\n"
        "region = us-west-2\n"
        "[sso-session corp]\nsso_start_url = https://corp.awsapps.com/start\nsso_region = eu-west-1\n"
        "[profile legacy]\nsso_start_url = https://old.awsapps.com/start\nsso_region = us-east-2\n"
        "sso_account_id = 210987654321\nsso_role_name = Admin\n"
        "[profile lost]\nsso_session = nowhere\nsso_account_id = 1\nsso_role_name = R\n"
        "[profile partial]\nsso_session = corp\nsso_role_name = R\n");
  const S3Config dev = resolve_s3_config({{"profile", "dev"}}, env());
  ASSERT_TRUE(dev.role_endpoint.has_value());
  EXPECT_EQ(dev.role_endpoint->kind, RoleCredentialsEndpoint::Kind::kSso);
  EXPECT_EQ(dev.role_endpoint->url,
            "https://portal.sso.eu-west-1.amazonaws.com/federation/credentials?account_id=123456789012&role_name="
            "Read%20Only");
  EXPECT_EQ(dev.role_endpoint->authorization_file, (dir_ / ".aws/sso/cache").string());
  EXPECT_EQ(dev.credentials_source, "IAM Identity Center (https://corp.awsapps.com/start, through the portal at " +
                                        dev.role_endpoint->url + ")");
  EXPECT_EQ(dev.region, "us-west-2");  // The profile's region signs S3; sso_region is the portal's.
  EXPECT_TRUE(dev.access_key_id.empty());
  const S3Config legacy =
      resolve_s3_config({}, env({{"AWS_PROFILE", "legacy"}, {"AWS_ENDPOINT_URL_SSO", "http://127.0.0.1:9/"}}));
  ASSERT_TRUE(legacy.role_endpoint.has_value());
  EXPECT_EQ(legacy.role_endpoint->url,
            "http://127.0.0.1:9/federation/credentials?account_id=210987654321&role_name=Admin");
  EXPECT_EQ(legacy.role_endpoint->sso_start_url, "https://old.awsapps.com/start");
  auto message = [&](const std::string& profile) {
    try {
      resolve_s3_config({{"profile", profile}}, env());
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("lost"),
            "profile 'lost' names sso_session 'nowhere', which ~/.aws/config has no "
            "[sso-session nowhere] for");
  EXPECT_EQ(message("partial"), "profile 'partial': an IAM Identity Center (SSO) profile needs sso_account_id");
}

TEST_F(S3ConfigTest, DescribeNeverShowsASecret) {
  const S3Config config =
      resolve_s3_config({{"key", "AKIDEXAMPLE"}, {"secret", "wJalrXUtnFEMI"}, {"token", "FQoGZXIvYXdz"}}, env());
  const std::string text = config.describe();
  EXPECT_EQ(text,
            "s3 endpoint https://s3.us-east-1.amazonaws.com, region us-east-1, virtual-hosted, credentials: "
            "storage_options");
}

TEST(S3UrlTest, KeysArePercentEncodedAndBucketsAddressedAsConfigured) {
  S3Config config;
  config.endpoint_url = "https://s3.us-east-1.amazonaws.com";
  EXPECT_EQ(s3_http_url(config, "s3://my-bucket/train/shard 0+1.tar"),
            "https://my-bucket.s3.us-east-1.amazonaws.com/train/shard%200%2B1.tar");
  // Upper case and dots over https cannot be host names: path-style.
  EXPECT_EQ(s3_http_url(config, "s3://My.Bucket/a"), "https://s3.us-east-1.amazonaws.com/My.Bucket/a");
  config.endpoint_url = "http://127.0.0.1:9000";
  config.path_style = true;
  EXPECT_EQ(s3_http_url(config, "s3://bucket/dir/caf\xc3\xa9.jpg"), "http://127.0.0.1:9000/bucket/dir/caf%C3%A9.jpg");
  EXPECT_THROW(s3_http_url(config, "s3:///key"), Error);
}

TEST_F(S3ConfigTest, TheChinaRegionsAreReadInTheirOwnDomain) {
  write("config",
        "[profile cn]\nregion = cn-northwest-1\nrole_arn = arn:aws-cn:iam::1:role/ml\n"
        "credential_source = Environment\n"
        "[profile cn-sso]\nsso_start_url = https://corp.awsapps.cn/start\nsso_region = cn-north-1\n"
        "sso_account_id = 1\nsso_role_name = Reader\n");
  const S3Config config =
      resolve_s3_config({{"profile", "cn"}}, env({{"AWS_ACCESS_KEY_ID", "A"}, {"AWS_SECRET_ACCESS_KEY", "S"}}));
  EXPECT_EQ(config.endpoint_url, "https://s3.cn-northwest-1.amazonaws.com.cn");
  ASSERT_TRUE(config.role_endpoint.has_value());
  EXPECT_EQ(config.role_endpoint->url, "https://sts.cn-northwest-1.amazonaws.com.cn");
  const S3Config sso = resolve_s3_config({{"profile", "cn-sso"}}, env());
  ASSERT_TRUE(sso.role_endpoint.has_value());
  EXPECT_EQ(sso.role_endpoint->sso_oidc_url, "https://oidc.cn-north-1.amazonaws.com.cn");
  EXPECT_EQ(sso.role_endpoint->url.rfind("https://portal.sso.cn-north-1.amazonaws.com.cn/federation/credentials?", 0),
            0u)
      << sso.role_endpoint->url;
  EXPECT_EQ(resolve_s3_config({{"region", "us-gov-west-1"}}, env()).endpoint_url,
            "https://s3.us-gov-west-1.amazonaws.com");
}

TEST_F(S3ConfigTest, ABucketInAnotherRegionIsReadFromThatRegionsEndpointOnAws) {
  const S3Config aws = resolve_s3_config({{"region", "us-east-1"}}, env());
  EXPECT_TRUE(aws.regional_endpoint);
  const S3Config moved = in_region(aws, "eu-west-1");
  EXPECT_EQ(moved.region, "eu-west-1");
  EXPECT_EQ(s3_http_url(moved, "s3://bucket/a"), "https://bucket.s3.eu-west-1.amazonaws.com/a");
  // China's regions are a partition of their own, in another domain.
  EXPECT_EQ(s3_http_url(in_region(aws, "cn-north-1"), "s3://bucket/a"),
            "https://bucket.s3.cn-north-1.amazonaws.com.cn/a");
  // A store's own endpoint stays: only the signing region changes.
  const S3Config own = resolve_s3_config({{"endpoint_url", "http://127.0.0.1:9000"}}, env());
  EXPECT_FALSE(own.regional_endpoint);
  EXPECT_EQ(s3_http_url(in_region(own, "eu-west-1"), "s3://bucket/a"), "http://127.0.0.1:9000/bucket/a");
}

TEST(S3UrlTest, GcsTakesAnHmacKeyAndDefaultsToItsXmlApi) {
  const S3Config config = gcs_config({{"key", "GOOG1EXAMPLE"}, {"secret", "s"}});
  EXPECT_EQ(config.endpoint_url, "https://storage.googleapis.com");
  EXPECT_EQ(config.region, "auto");
  EXPECT_TRUE(config.path_style);
  EXPECT_EQ(s3_http_url(config, "s3://bucket/a b.jpg"), "https://storage.googleapis.com/bucket/a%20b.jpg");
  EXPECT_THROW(gcs_config({{"key", "k"}}), Error);
  EXPECT_THROW(gcs_config({{"key", "k"}, {"secret", "s"}, {"profile", "p"}}), Error);
}

TEST(S3UrlTest, ErrorBodiesGiveTheirCode) {
  EXPECT_EQ(s3_error_code("<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>x</Message></Error>"),
            "NoSuchKey");
  EXPECT_EQ(s3_error_code("<html>Not Found</html>"), "");
}

TEST(S3UrlTest, AnErrorCodeThatIsNotAWordStaysOutOfTheMessage) {
  // A server's bytes (a line break, markup) never reach an error message.
  EXPECT_EQ(s3_error_code("<Error><Code>Slow\nDown</Code></Error>"), "");
  EXPECT_EQ(s3_error_code("<Error><Code><x</Code></Error>"), "");
  EXPECT_EQ(s3_error_code("<Error><Code></Code></Error>"), "");
  EXPECT_EQ(s3_error_code("<Error><Code>" + std::string(65, 'A') + "</Code></Error>"), "");
  EXPECT_EQ(s3_error_code("<Error><Code>Internal.Error_1-x</Code></Error>"), "Internal.Error_1-x");
}

TEST(AwsIniTest, SectionsKeysCommentsAndNestedBlocks) {
  const auto sections = parse_aws_ini("; c\n[a]\nk = v \n  \n[b]\ns3 =\n  x = 1\nK2=w\n# z\n");
  ASSERT_EQ(sections.size(), 2u);
  EXPECT_EQ(sections.at("a").at("k"), "v");
  EXPECT_EQ(sections.at("b").at("k2"), "w");
  EXPECT_EQ(sections.at("b").count("x"), 0u);
  // As Python's configparser (botocore's): the first of '=' and ':' ends the key.
  const auto colons = parse_aws_ini("[a]\nregion: eu-west-1\nrole_arn = arn:aws:iam::1:role/r\n");
  EXPECT_EQ(colons.at("a").at("region"), "eu-west-1");
  EXPECT_EQ(colons.at("a").at("role_arn"), "arn:aws:iam::1:role/r");
  // A profile's name as shlex splits it; an unclosed quote is left as it is.
  const auto named = parse_aws_ini("[profile  x]\n[profile 'y z']\n[profile \"w]\n[profiles]\n");
  EXPECT_EQ(named.count("profile x"), 1u);
  EXPECT_EQ(named.count("profile y z"), 1u);
  EXPECT_EQ(named.count("profile \"w"), 1u);
  EXPECT_EQ(named.count("profiles"), 1u);
}

}  // namespace
}  // namespace conveyor
