#pragma once

#include <memory>
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

/// Something a layer above the core attaches to an Error and gets back where
/// the error is translated: the Python bindings attach the Python exception a
/// user callback raised, so that it becomes the raised error's `__cause__`.
/// The core only carries it (a subclass's destructor may run on any thread).
class ErrorAttachment {
 public:
  virtual ~ErrorAttachment() = default;
};

/// The one exception type of conveyor. Every failure carries its kind, its
/// cause, and, once known, the key of the sample it concerns (a path, or
/// "shard.tar:member"). what() is "key: cause" or just "cause".
///
/// Thread-safety: immutable after construction.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string cause, std::string key = {},
        std::shared_ptr<const ErrorAttachment> attachment = nullptr);

  ErrorKind kind() const noexcept { return kind_; }
  const std::string& cause() const noexcept { return cause_; }
  const std::string& key() const noexcept { return key_; }
  /// What the thrower attached (see ErrorAttachment), or null.
  const std::shared_ptr<const ErrorAttachment>& attachment() const noexcept { return attachment_; }

  /// Returns the same error naming `key` (kept unchanged if it already names one).
  Error with_key(std::string key) const;

 private:
  ErrorKind kind_;
  std::string cause_;
  std::string key_;
  std::shared_ptr<const ErrorAttachment> attachment_;
};

/// Throws Error{kConfig, message} when `condition` is false.
inline void check_config(bool condition, std::string_view message) {
  if (!condition) throw Error(ErrorKind::kConfig, std::string(message));
}

}  // namespace conveyor
