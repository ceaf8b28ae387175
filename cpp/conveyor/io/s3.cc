#include "conveyor/io/s3.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "conveyor/core/error.h"

namespace conveyor {

namespace {

std::string trim(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string_view::npos) return {};
  const size_t end = text.find_last_not_of(" \t\r");
  return std::string(text.substr(begin, end - begin + 1));
}

// One AWS file: its path (from `variable`, else ~/.aws/<name>), as shown in
// messages, and its sections (empty when it does not exist).
struct AwsFile {
  std::string shown;
  std::map<std::string, std::map<std::string, std::string>> sections;
};

AwsFile read_aws_file(const GetEnv& getenv, const std::string& variable, const std::string& name) {
  AwsFile file;
  std::string path;
  if (auto given = nonempty(getenv(variable))) {
    path = file.shown = *given;
  } else if (auto home = nonempty(getenv("HOME"))) {
    path = *home + "/.aws/" + name;
    file.shown = "~/.aws/" + name;
  } else {
    return file;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return file;
  std::ostringstream text;
  text << in.rdbuf();
  file.sections = parse_aws_ini(text.str());
  return file;
}

const std::map<std::string, std::string>* section(const AwsFile& file, const std::string& name) {
  auto it = file.sections.find(name);
  return it == file.sections.end() ? nullptr : &it->second;
}

// Profile `name`'s section of the config file: "[profile NAME]", and for
// the default profile "[default]" or "[profile default]" (botocore reads
// both; parse_aws_ini keeps the later).
const std::map<std::string, std::string>* config_profile(const AwsFile& file, const std::string& name) {
  if (name == "default") {
    if (const auto* values = section(file, name)) return values;
  }
  return section(file, "profile " + name);
}

std::optional<std::string> value_in(const std::map<std::string, std::string>* values, const std::string& key) {
  if (values == nullptr) return std::nullopt;
  auto it = values->find(key);
  return it == values->end() || it->second.empty() ? std::nullopt : std::optional(it->second);
}

// The first lookup that finds a value, tried in order (later ones not called).
template <class... Lookups>
std::optional<std::string> first_of(const Lookups&... lookups) {
  std::optional<std::string> found;
  ((found = found ? found : lookups()), ...);
  return found;
}

bool is_unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

// Whether `bucket` can be the first label of a host name: S3's DNS-compatible
// names (3-63 of a-z 0-9 - .), without dots over https (the certificate's
// wildcard covers one label only).
bool virtual_host_compatible(std::string_view bucket, bool https) {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  if (bucket.front() == '-' || bucket.back() == '-' || bucket.front() == '.' || bucket.back() == '.') return false;
  return std::all_of(bucket.begin(), bucket.end(), [https](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || (c == '.' && !https);
  });
}

bool parse_bool(const std::string& key, const std::string& value) {
  const std::string text = ascii_lower(value);
  if (text == "true" || text == "1") return true;
  if (text == "false" || text == "0" || text.empty()) return false;
  throw Error(ErrorKind::kConfig, "storage_options: " + key + " must be true or false, got '" + value + "'");
}

// Profiles a chain of roles may pass through: a real one has 2 or 3; a
// hostile config of thousands would exhaust the stack.
constexpr size_t kMaxSourceProfiles = 64;

// The credentials the profiles of ~/.aws/credentials and ~/.aws/config give,
// as the AWS CLI reads them. Messages name the profile, never a secret.
class ProfileCredentials {
 public:
  struct Found {
    std::optional<RoleCredentialsEndpoint::SourceKeys> keys;
    std::optional<RoleCredentialsEndpoint> endpoint;  ///< Where they are read: a role, SSO, a process.
  };

  /// `files`: both files as messages show them; `sts_region`: the region
  /// STS is asked in (empty: the global endpoint).
  ProfileCredentials(const AwsFile& credentials_file, const AwsFile& config_file, std::string files,
                     const GetEnv& getenv, std::string sts_region)
      : credentials_file_(credentials_file),
        config_file_(config_file),
        files_(std::move(files)),
        getenv_(getenv),
        sts_region_(std::move(sts_region)) {}

  /// Profile `chain.back()`'s credentials; none when it names none.
  /// `chain`: the profiles whose roles led here, each the source_profile of
  /// the one before. In botocore's order: its role (with a web identity
  /// token, or assumed with a source's credentials), its IAM Identity
  /// Center role, its keys in the credentials file, its credential_process,
  /// its keys in the config file. Read as a source, a profile with keys of
  /// its own lends them rather than assume its role (as botocore does).
  Found read(std::vector<std::string>& chain) const {
    const std::string& name = chain.back();
    const auto role_arn = value(name, "role_arn");
    const bool web_identity = value(name, "web_identity_token_file").has_value();
    check_config(role_arn || !web_identity, "profile '" + name + "' has a web_identity_token_file but no role_arn");
    const bool lends_keys =
        chain.size() > 1 && (value(name, "aws_access_key_id") || value(name, "aws_secret_access_key"));
    if (role_arn && (web_identity || !lends_keys)) return {{}, role_of(chain, *role_arn)};
    if (auto sso = sso_of(name)) return {{}, std::move(sso)};
    if (auto keys = keys_in(credentials_file_, credentials_section(name), name)) return {std::move(keys), {}};
    if (const auto process = value(name, "credential_process")) {
      try {
        return {{}, process_endpoint(name, *process)};
      } catch (const Error& e) {
        throw Error(ErrorKind::kConfig, "profile '" + name + "': " + e.what());
      }
    }
    if (auto keys = keys_in(config_file_, config_section(name), name)) return {std::move(keys), {}};
    return {};
  }

 private:
  const std::map<std::string, std::string>* credentials_section(const std::string& name) const {
    return section(credentials_file_, name);
  }
  const std::map<std::string, std::string>* config_section(const std::string& name) const {
    return config_profile(config_file_, name);
  }

  // A profile's value, in either file (the credentials file's first: the
  // AWS CLI lays it over the config file's profile).
  std::optional<std::string> value(const std::string& name, const char* key) const {
    return first_of([&] { return value_in(credentials_section(name), key); },
                    [&] { return value_in(config_section(name), key); });
  }

  // The keys of profile `name` in `file` (its section `values`), from
  // `shown [name]`. An access key without its secret is refused, as botocore
  // refuses it (PartialCredentialsError).
  static std::optional<RoleCredentialsEndpoint::SourceKeys> keys_in(const AwsFile& file,
                                                                    const std::map<std::string, std::string>* values,
                                                                    const std::string& name) {
    const auto id = value_in(values, "aws_access_key_id");
    if (!id) return std::nullopt;
    const auto secret = value_in(values, "aws_secret_access_key");
    check_config(secret.has_value(),
                 "profile '" + name + "' has an aws_access_key_id but no aws_secret_access_key in " + file.shown);
    return RoleCredentialsEndpoint::SourceKeys{*id, *secret, value_in(values, "aws_session_token").value_or(""),
                                               file.shown + " [" + name + "]"};
  }

  // The keys of profile `name`, in the credentials file, else the config file.
  std::optional<RoleCredentialsEndpoint::SourceKeys> keys_of(const std::string& name) const {
    if (auto keys = keys_in(credentials_file_, credentials_section(name), name)) return keys;
    return keys_in(config_file_, config_section(name), name);
  }

  // IAM Identity Center: its settings in the profile (legacy) or in the
  // [sso-session NAME] it names.
  std::optional<RoleCredentialsEndpoint> sso_of(const std::string& name) const {
    const auto* profile = config_section(name);
    const auto session_name = value_in(profile, "sso_session");
    if (!session_name && !value_in(profile, "sso_start_url")) return std::nullopt;
    const auto* session = session_name ? section(config_file_, "sso-session " + *session_name) : profile;
    if (session == nullptr) {
      throw Error(ErrorKind::kConfig, "profile '" + name + "' names sso_session '" + *session_name + "', which " +
                                          config_file_.shown + " has no [sso-session " + *session_name + "] for");
    }
    const auto text = [&](const auto* values, const char* key) { return value_in(values, key).value_or(""); };
    try {
      return sso_endpoint({text(session, "sso_start_url"), text(session, "sso_region"), text(profile, "sso_account_id"),
                           text(profile, "sso_role_name")},
                          getenv_);
    } catch (const Error& e) {
      throw Error(ErrorKind::kConfig, "profile '" + name + "': " + e.what());
    }
  }

  // Where the role of profile `chain.back()` is read: STS, with the keys or
  // credentials its source gives, or with its web identity token.
  RoleCredentialsEndpoint role_of(std::vector<std::string>& chain, const std::string& role_arn) const {
    const std::string name = chain.back();
    if (const auto token_file = value(name, "web_identity_token_file")) {
      // The role with a web identity token (AssumeRoleWithWebIdentity), as
      // the environment's AWS_WEB_IDENTITY_TOKEN_FILE, from the profile.
      const GetEnv from_profile = [&](const std::string& variable) -> std::optional<std::string> {
        if (variable == "AWS_WEB_IDENTITY_TOKEN_FILE") return token_file;
        if (variable == "AWS_ROLE_ARN") return role_arn;
        if (variable == "AWS_ROLE_SESSION_NAME") return value(name, "role_session_name");
        if (variable == "AWS_REGION") return sts_region_.empty() ? std::nullopt : std::optional(sts_region_);
        return getenv_(variable);
      };
      return *web_identity_endpoint(from_profile);
    }
    check_config(!value(name, "mfa_serial"), "profile '" + name +
                                                 "' assumes its role with an MFA code (mfa_serial), which a job "
                                                 "cannot type: export the role's keys (aws configure "
                                                 "export-credentials --profile " +
                                                 chain.front() + " --format env)");
    AssumeRoleProfile role{name,
                           role_arn,
                           value(name, "role_session_name").value_or(""),
                           value(name, "external_id").value_or(""),
                           value(name, "duration_seconds").value_or(""),
                           sts_region_,
                           {}};
    std::shared_ptr<const RoleCredentialsEndpoint> source_endpoint;
    const auto source_profile = value(name, "source_profile");
    const auto credential_source = value(name, "credential_source");
    if (source_profile) {
      check_config(!credential_source,
                   "profile '" + name + "' has both source_profile and credential_source: the AWS CLI takes one");
      check_config(
          credentials_section(*source_profile) != nullptr || config_section(*source_profile) != nullptr,
          "profile '" + name + "': its source_profile '" + *source_profile + "' is not a profile of " + files_);
      if (*source_profile == name) {
        // A profile may assume its role with its own keys, as in the AWS CLI.
        auto keys = keys_of(name);
        check_config(keys.has_value(), "profile '" + name + "' is its own source_profile but has no keys in " + files_);
        role.source = std::move(*keys);
      } else {
        if (std::find(chain.begin(), chain.end(), *source_profile) != chain.end()) {
          std::string loop;
          for (const std::string& link : chain) loop += link + " -> ";
          throw Error(ErrorKind::kConfig,
                      "profile '" + chain.front() + "': its source_profiles loop: " + loop + *source_profile);
        }
        check_config(chain.size() < kMaxSourceProfiles, "profile '" + chain.front() + "': its source_profiles go " +
                                                            std::to_string(kMaxSourceProfiles) +
                                                            " deep, more than a chain of roles needs");
        chain.push_back(*source_profile);
        Found found = read(chain);
        chain.pop_back();
        if (found.keys) {
          role.source = std::move(*found.keys);
        } else if (found.endpoint) {
          source_endpoint = std::make_shared<const RoleCredentialsEndpoint>(std::move(*found.endpoint));
        } else {
          throw Error(ErrorKind::kConfig, "profile '" + name + "': its source_profile '" + *source_profile +
                                              "' has no credentials in " + files_ +
                                              " (keys, a role_arn, IAM Identity Center or credential_process)");
        }
      }
    } else {
      check_config(credential_source.has_value(), "profile '" + name +
                                                      "' names a role_arn but none of source_profile, "
                                                      "credential_source and web_identity_token_file");
      source_endpoint = credential_source_of(name, *credential_source, role);
    }
    RoleCredentialsEndpoint endpoint = assume_role_endpoint(role, getenv_);
    endpoint.source_endpoint = std::move(source_endpoint);
    return endpoint;
  }

  // A role's credential_source: the environment's keys (into `role`), or
  // where the instance's or the container's role is read.
  std::shared_ptr<const RoleCredentialsEndpoint> credential_source_of(const std::string& name,
                                                                      const std::string& source,
                                                                      AssumeRoleProfile& role) const {
    const std::string message_start = "profile '" + name + "' assumes its role with ";
    // The names as written, as botocore compares them.
    if (source == "Environment") {
      const auto id = nonempty(getenv_("AWS_ACCESS_KEY_ID"));
      const auto secret = nonempty(getenv_("AWS_SECRET_ACCESS_KEY"));
      check_config(id && secret, message_start +
                                     "the environment's keys (credential_source = Environment), but "
                                     "AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY is not set");
      role.source = {*id, *secret, nonempty(getenv_("AWS_SESSION_TOKEN")).value_or(""),
                     "the environment (AWS_ACCESS_KEY_ID)"};
      return nullptr;
    }
    if (source == "Ec2InstanceMetadata") {
      // The instance's role, even where a container's endpoint is set.
      const GetEnv instance = [&](const std::string& variable) -> std::optional<std::string> {
        if (variable.rfind("AWS_CONTAINER_CREDENTIALS_", 0) == 0) return std::nullopt;
        return getenv_(variable);
      };
      std::optional<RoleCredentialsEndpoint> endpoint = role_credentials_endpoint(instance);
      check_config(endpoint.has_value(), message_start +
                                             "the instance's role (credential_source = Ec2InstanceMetadata), but "
                                             "AWS_EC2_METADATA_DISABLED is true");
      return std::make_shared<const RoleCredentialsEndpoint>(std::move(*endpoint));
    }
    if (source == "EcsContainer") {
      std::optional<RoleCredentialsEndpoint> endpoint = role_credentials_endpoint(getenv_);
      check_config(endpoint && endpoint->kind == RoleCredentialsEndpoint::Kind::kContainer,
                   message_start +
                       "the container's role (credential_source = EcsContainer), but neither "
                       "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI nor AWS_CONTAINER_CREDENTIALS_FULL_URI is set");
      return std::make_shared<const RoleCredentialsEndpoint>(std::move(*endpoint));
    }
    throw Error(ErrorKind::kConfig, message_start + "credential_source = " + source +
                                        ", which the AWS CLI does not know (Environment, Ec2InstanceMetadata or "
                                        "EcsContainer)");
  }

  const AwsFile& credentials_file_;
  const AwsFile& config_file_;
  std::string files_;
  const GetEnv& getenv_;
  std::string sts_region_;
};

}  // namespace

const std::vector<std::string>& s3_option_names() {
  static const std::vector<std::string> names = {"key",     "secret", "token",        "anon",
                                                 "profile", "region", "endpoint_url", "addressing_style"};
  return names;
}

namespace {

// The words of a section name as Python's shlex.split gives them (botocore
// splits "[profile NAME]" so): runs of spaces and tabs separate them, single
// or double quotes hold them together; nullopt for an unclosed quote.
std::optional<std::vector<std::string>> section_words(std::string_view name) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (const char c : name) {
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else {
        word += c;
      }
    } else if (c == '"' || c == '\'') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote != 0) return std::nullopt;
  if (in_word) words.push_back(std::move(word));
  return words;
}

// A section's name as it is looked up: "[profile  NAME]", "[profile\tNAME]"
// and "[profile \"NAME\"]" are all "profile NAME", as botocore reads them.
std::string section_name(std::string_view name) {
  if (name.substr(0, 7) != "profile") return std::string(name);
  const std::optional<std::vector<std::string>> words = section_words(name);
  if (!words || words->size() != 2 || (*words)[0] != "profile") return std::string(name);
  return "profile " + (*words)[1];
}

}  // namespace

std::map<std::string, std::map<std::string, std::string>> parse_aws_ini(std::string_view text) {
  std::map<std::string, std::map<std::string, std::string>> sections;
  std::map<std::string, std::string>* current = nullptr;
  bool in_nested = false;  // Inside an "s3 =" block of indented lines.
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view raw = text.substr(start, end - start);
    start = end + 1;
    const std::string line = trim(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    const bool indented = raw[0] == ' ' || raw[0] == '\t';
    if (line.front() == '[' && line.back() == ']') {
      const std::string name = section_name(trim(std::string_view(line).substr(1, line.size() - 2)));
      // A later section of a profile replaces an earlier one, as in
      // botocore's profile map ([default] and [profile default] too).
      if (name == "default") sections.erase("profile default");
      if (name == "profile default") sections.erase("default");
      current = &sections[name];
      current->clear();
      in_nested = false;
      continue;
    }
    if (current == nullptr || (in_nested && indented)) continue;
    in_nested = false;
    // "key = value" or "key: value" (Python's configparser, which botocore
    // reads them with, takes the first of either).
    const size_t equals = line.find_first_of("=:");
    if (equals == std::string::npos) continue;
    const std::string key = ascii_lower(trim(std::string_view(line).substr(0, equals)));
    const std::string value = trim(std::string_view(line).substr(equals + 1));
    if (value.empty()) {
      in_nested = true;  // "s3 =" opens a block of its own keys.
      continue;
    }
    (*current)[key] = value;
  }
  return sections;
}

S3Config resolve_s3_config(const std::map<std::string, std::string>& options, const GetEnv& getenv) {
  const std::vector<std::string>& known = s3_option_names();
  for (const auto& [key, value] : options) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string names;
      for (const std::string& name : known) names += (names.empty() ? "" : ", ") + name;
      throw Error(ErrorKind::kConfig, "storage_options: unknown key '" + key + "' for s3:// (known: " + names + ")");
    }
  }
  auto option = [&](const std::string& key) -> std::optional<std::string> {
    auto it = options.find(key);
    return it == options.end() || it->second.empty() ? std::nullopt : std::optional(it->second);
  };

  const std::optional<std::string> named_profile = option("profile");
  const std::string profile = named_profile.value_or(nonempty(getenv("AWS_PROFILE")).value_or("default"));
  const AwsFile credentials_file = read_aws_file(getenv, "AWS_SHARED_CREDENTIALS_FILE", "credentials");
  const AwsFile config_file = read_aws_file(getenv, "AWS_CONFIG_FILE", "config");
  const auto* credentials_section = section(credentials_file, profile);
  const auto* config_section = config_profile(config_file, profile);
  if (named_profile && credentials_section == nullptr && config_section == nullptr) {
    throw Error(ErrorKind::kConfig,
                "storage_options: profile '" + profile + "' is in neither " +
                    (credentials_file.shown.empty() ? "~/.aws/credentials" : credentials_file.shown) + " nor " +
                    (config_file.shown.empty() ? "~/.aws/config" : config_file.shown));
  }

  // Where credentials were looked for, once the profile's files are.
  const std::string profile_files = (credentials_file.shown.empty() ? "~/.aws/credentials" : credentials_file.shown) +
                                    " and " + (config_file.shown.empty() ? "~/.aws/config" : config_file.shown);
  const std::string looked_in_files = "storage_options, AWS_ACCESS_KEY_ID, " + profile_files + " [" + profile + "]";
  // S3's region, and STS's for a role (signed for one region): none given is
  // us-east-1 for S3 and STS's global endpoint.
  const std::optional<std::string> region = first_of(
      [&] { return option("region"); }, [&] { return nonempty(getenv("AWS_REGION")); },
      [&] { return nonempty(getenv("AWS_DEFAULT_REGION")); }, [&] { return value_in(config_section, "region"); });
  S3Config config;
  config.anonymous = option("anon") ? parse_bool("anon", *option("anon")) : false;
  if (option("token") && !(option("key") && option("secret"))) {
    // A session token signs nothing alone: dropped, it would leave the
    // requests signed by other credentials, or unsigned.
    throw Error(ErrorKind::kConfig, "storage_options: token needs key and secret (a session's three go together)");
  }
  if (config.anonymous) {
    config.credentials_source = "anon=True";
  } else if (option("key") || option("secret")) {
    if (!option("key") || !option("secret")) {
      throw Error(ErrorKind::kConfig, "storage_options: key and secret must be given together");
    }
    config.access_key_id = *option("key");
    config.secret_access_key = *option("secret");
    config.session_token = option("token").value_or("");
    config.credentials_source = "storage_options";
  } else if (auto id = nonempty(getenv("AWS_ACCESS_KEY_ID")); id && !named_profile) {
    if (!nonempty(getenv("AWS_SECRET_ACCESS_KEY"))) {
      throw Error(ErrorKind::kConfig, "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
    }
    config.access_key_id = *id;
    config.secret_access_key = *getenv("AWS_SECRET_ACCESS_KEY");
    config.session_token = nonempty(getenv("AWS_SESSION_TOKEN")).value_or("");
    config.credentials_source = "environment (AWS_ACCESS_KEY_ID)";
  } else if (!named_profile && (config.role_endpoint = web_identity_endpoint(getenv))) {
    // EKS's web identity comes before the shared files, as in the AWS SDKs.
    config.looked_in = "storage_options, AWS_ACCESS_KEY_ID";
    config.credentials_source = config.role_endpoint->describe();
  } else {
    // The profile's own credentials (a role it assumes, its keys, its IAM
    // Identity Center role, its credential_process), as the AWS CLI reads
    // them.
    const ProfileCredentials profiles{credentials_file, config_file, profile_files, getenv, region.value_or("")};
    std::vector<std::string> chain{profile};
    ProfileCredentials::Found found = profiles.read(chain);
    if (found.keys) {
      config.access_key_id = found.keys->access_key_id;
      config.secret_access_key = found.keys->secret_access_key;
      config.session_token = found.keys->session_token;
      config.credentials_source = found.keys->from;
    } else if (found.endpoint) {
      config.role_endpoint = std::move(found.endpoint);
      config.looked_in = looked_in_files;
      config.credentials_source = config.role_endpoint->describe();
    }
    if (config.credentials_source.empty()) {
      config.looked_in = looked_in_files;
      if ((config.role_endpoint = role_credentials_endpoint(getenv))) {
        config.credentials_source = config.role_endpoint->describe();
      } else {
        config.anonymous = true;
        config.credentials_source = "none found (looked in " + config.looked_in + ")";
      }
    }
  }

  config.region = region.value_or("us-east-1");
  const std::optional<std::string> endpoint = first_of(
      [&] { return option("endpoint_url"); }, [&] { return nonempty(getenv("AWS_ENDPOINT_URL_S3")); },
      [&] { return nonempty(getenv("AWS_ENDPOINT_URL")); }, [&] { return value_in(config_section, "endpoint_url"); });
  config.regional_endpoint = !endpoint.has_value();
  config.endpoint_url = endpoint.value_or(aws_service_url("s3", config.region));
  while (!config.endpoint_url.empty() && config.endpoint_url.back() == '/') config.endpoint_url.pop_back();
  const std::string& base = config.endpoint_url;
  if (base.rfind("http://", 0) != 0 && base.rfind("https://", 0) != 0) {
    throw Error(ErrorKind::kConfig,
                "storage_options: endpoint_url must start with http:// or https://, got '" + config.endpoint_url + "'");
  }
  const std::string style = ascii_lower(option("addressing_style").value_or("auto"));
  if (style != "auto" && style != "path" && style != "virtual") {
    throw Error(ErrorKind::kConfig,
                "storage_options: addressing_style must be 'auto', 'path' or 'virtual', got '" + style + "'");
  }
  config.path_style = style == "path" || (style == "auto" && endpoint.has_value());
  return config;
}

S3Config gcs_config(const std::map<std::string, std::string>& options) {
  for (const auto& [key, value] : options) {
    if (key != "key" && key != "secret" && key != "endpoint_url" && key != "region") {
      throw Error(ErrorKind::kConfig,
                  "storage_options: unknown key '" + key +
                      "' for gs:// through GCS's XML API (known: key, secret, endpoint_url, region)");
    }
  }
  auto option = [&](const std::string& key) {
    auto it = options.find(key);
    return it == options.end() ? std::string() : it->second;
  };
  if (option("key").empty() || option("secret").empty()) {
    throw Error(ErrorKind::kConfig, "storage_options: gs:// through GCS's XML API needs an HMAC key: key and secret");
  }
  S3Config config;
  config.access_key_id = option("key");
  config.secret_access_key = option("secret");
  config.region = option("region").empty() ? "auto" : option("region");
  config.endpoint_url = option("endpoint_url").empty() ? "https://storage.googleapis.com" : option("endpoint_url");
  while (config.endpoint_url.size() > 8 && config.endpoint_url.back() == '/') config.endpoint_url.pop_back();
  if (config.endpoint_url.rfind("http://", 0) != 0 && config.endpoint_url.rfind("https://", 0) != 0) {
    throw Error(ErrorKind::kConfig,
                "storage_options: endpoint_url must start with http:// or https://, got '" + config.endpoint_url + "'");
  }
  config.path_style = true;
  config.credentials_source = "storage_options (HMAC key)";
  return config;
}

std::string ascii_lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::string percent_encoded(std::string_view key, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string encoded;
  encoded.reserve(key.size());
  for (unsigned char c : key) {
    if (is_unreserved(c) || (c == '/' && keep_slash)) {
      encoded += static_cast<char>(c);
    } else {
      encoded += '%';
      encoded += kHex[c >> 4];
      encoded += kHex[c & 15];
    }
  }
  return encoded;
}

S3Config in_region(const S3Config& config, const std::string& region) {
  S3Config moved = config;
  moved.region = region;
  if (config.regional_endpoint) moved.endpoint_url = aws_service_url("s3", region);
  return moved;
}

std::string S3Config::describe() const {
  return "s3 endpoint " + endpoint_url + ", region " + region + (path_style ? ", path-style" : ", virtual-hosted") +
         ", credentials: " + credentials_source;
}

std::pair<std::string, std::string> split_s3_url(std::string_view s3_url) {
  constexpr std::string_view kScheme = "s3://";
  std::string_view rest = s3_url.substr(std::min(s3_url.size(), kScheme.size()));
  const size_t slash = rest.find('/');
  const std::string_view bucket = rest.substr(0, slash);
  const std::string_view key = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
  if (ascii_lower(std::string(s3_url.substr(0, kScheme.size()))) != kScheme || bucket.empty()) {
    throw Error(ErrorKind::kConfig, "not an s3://bucket/key URL", std::string(s3_url));
  }
  return {std::string(bucket), std::string(key)};
}

namespace {

// The bucket's base URL (ending in "/") under `config`'s addressing.
std::string bucket_url(const S3Config& config, std::string_view bucket) {
  const std::string& base = config.endpoint_url;
  const bool https = base.rfind("https://", 0) == 0;
  if (config.path_style || !virtual_host_compatible(bucket, https)) return base + "/" + percent_encoded(bucket) + "/";
  const size_t host = base.find("://") + 3;
  return base.substr(0, host) + std::string(bucket) + "." + base.substr(host) + "/";
}

// The text of `xml` with its five entities and numeric references replaced.
std::string xml_unescape(std::string_view xml) {
  std::string out;
  out.reserve(xml.size());
  for (size_t i = 0; i < xml.size(); ++i) {
    if (xml[i] != '&') {
      out += xml[i];
      continue;
    }
    const size_t end = xml.find(';', i);
    if (end == std::string_view::npos || end - i > 10)
      throw Error(ErrorKind::kRead, "malformed XML entity in a listing");
    const std::string_view entity = xml.substr(i + 1, end - i - 1);
    static const std::map<std::string_view, char> named = {
        {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
    if (auto it = named.find(entity); it != named.end()) {
      out += it->second;
    } else if (entity.size() > 1 && entity[0] == '#') {
      const bool hex = entity[1] == 'x' || entity[1] == 'X';
      const std::string digits(entity.substr(hex ? 2 : 1));
      char* parsed_end = nullptr;
      const unsigned long code = std::strtoul(digits.c_str(), &parsed_end, hex ? 16 : 10);
      if (digits.empty() || *parsed_end != '\0' || code > 0x10FFFF) {
        throw Error(ErrorKind::kRead, "malformed XML character reference in a listing");
      }
      // UTF-8 of the code point.
      if (code < 0x80) {
        out += static_cast<char>(code);
      } else if (code < 0x800) {
        out += static_cast<char>(0xC0 | (code >> 6));
        out += static_cast<char>(0x80 | (code & 0x3F));
      } else if (code < 0x10000) {
        out += static_cast<char>(0xE0 | (code >> 12));
        out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (code & 0x3F));
      } else {
        out += static_cast<char>(0xF0 | (code >> 18));
        out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (code & 0x3F));
      }
    } else {
      throw Error(ErrorKind::kRead, "unknown XML entity &" + std::string(entity) + "; in a listing");
    }
    i = end;
  }
  return out;
}

// The text of the first <tag>...</tag> in `xml` at or after `from`; `at` is
// set past its end. nullopt when there is none.
std::optional<std::string_view> element(std::string_view xml, std::string_view tag, size_t from, size_t* at) {
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  const size_t begin = xml.find(open, from);
  if (begin == std::string_view::npos) return std::nullopt;
  const size_t end = xml.find(close, begin + open.size());
  if (end == std::string_view::npos) return std::nullopt;
  if (at != nullptr) *at = end + close.size();
  return xml.substr(begin + open.size(), end - begin - open.size());
}

}  // namespace

std::string s3_http_url(const S3Config& config, std::string_view s3_url) {
  const auto [bucket, key] = split_s3_url(s3_url);
  return bucket_url(config, bucket) + percent_encoded(key);
}

std::string s3_list_url(const S3Config& config, std::string_view bucket, std::string_view prefix,
                        std::string_view continuation_token) {
  std::string query;
  if (!continuation_token.empty()) query += "continuation-token=" + percent_encoded(continuation_token, false) + "&";
  query += "list-type=2&prefix=" + percent_encoded(prefix, false);
  return bucket_url(config, bucket) + "?" + query;
}

S3ListPage parse_s3_list_page(std::string_view xml) {
  if (xml.find("<ListBucketResult") == std::string_view::npos) {
    throw Error(ErrorKind::kRead, "the listing reply is not a ListBucketResult");
  }
  S3ListPage page;
  size_t at = 0;
  while (auto contents = element(xml, "Contents", at, &at)) {
    const auto key = element(*contents, "Key", 0, nullptr);
    const auto size = element(*contents, "Size", 0, nullptr);
    uint64_t bytes = 0;
    if (!key || !size || std::from_chars(size->data(), size->data() + size->size(), bytes).ec != std::errc()) {
      throw Error(ErrorKind::kRead, "a listed object has no Key or Size");
    }
    page.objects.emplace_back(xml_unescape(*key), bytes);
  }
  const auto truncated = element(xml, "IsTruncated", 0, nullptr);
  if (truncated && *truncated == "true") {
    const auto token = element(xml, "NextContinuationToken", 0, nullptr);
    if (!token || token->empty()) throw Error(ErrorKind::kRead, "a truncated listing gives no NextContinuationToken");
    page.next_continuation_token = xml_unescape(*token);
  }
  return page;
}

std::string s3_error_code(std::string_view body) {
  if (body.find("<Error>") == std::string_view::npos) return {};
  const size_t open = body.find("<Code>");
  if (open == std::string_view::npos) return {};
  const size_t begin = open + 6;
  const size_t close = body.find("</Code>", begin);
  if (close == std::string_view::npos || close == begin || close - begin > 64) return {};
  // S3's codes are words ("NoSuchKey", "SlowDown"); anything else a server
  // sends there (line breaks, markup) stays out of our error messages.
  const std::string_view code = body.substr(begin, close - begin);
  const auto is_word = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
  };
  if (!std::all_of(code.begin(), code.end(), is_word)) return {};
  return std::string(code);
}

}  // namespace conveyor
