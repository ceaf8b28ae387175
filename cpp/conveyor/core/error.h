#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace conveyor {

/// What went wrong, coarsely; the Python layer maps each kind to one exception
/// class (ConfigError, ReadError, DecodeError, ...).
enum class ErrorKind {
  kConfig,     ///< Invalid argument or option, found at construction.
  kRead,       ///< A sample's bytes could not be read (missing, permission, I/O, bad shard).
  kDecode,     ///< A sample's bytes are not a valid image (corrupt, truncated, unsupported).
  kTooLarge,   ///< A sample's header claims more pixels than the configured limit.
  kCancelled,  ///< The operation was stopped by stop()/close().
  kInternal,   ///< Anything else, e.g. a std::exception escaping a user callback.
};

/// Returns a stable lower-case name for `kind` ("config", "read", ...).
std::string_view error_kind_name(ErrorKind kind);

/// The one exception type of conveyor. Every failure carries its kind, its
/// cause, and, once known, the key of the sample it concerns (a path, or
/// "shard.tar:member"). what() is "key: cause" or just "cause".
///
/// Thread-safety: immutable after construction.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string cause, std::string key = {});

  ErrorKind kind() const noexcept { return kind_; }
  const std::string& cause() const noexcept { return cause_; }
  const std::string& key() const noexcept { return key_; }

  /// Returns the same error naming `key` (kept unchanged if it already names one).
  Error with_key(std::string key) const;

 private:
  ErrorKind kind_;
  std::string cause_;
  std::string key_;
};

/// Throws Error{kConfig, message} when `condition` is false.
inline void check_config(bool condition, std::string_view message) {
  if (!condition) throw Error(ErrorKind::kConfig, std::string(message));
}

}  // namespace conveyor
