#include "conveyor/core/error.h"

#include <utility>

namespace conveyor {

std::string_view error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kConfig:
      return "config";
    case ErrorKind::kRead:
      return "read";
    case ErrorKind::kDecode:
      return "decode";
    case ErrorKind::kTooLarge:
      return "too_large";
    case ErrorKind::kCancelled:
      return "cancelled";
    case ErrorKind::kInternal:
      return "internal";
  }
  return "internal";
}

namespace {
std::string format_message(const std::string& cause, const std::string& key) {
  return key.empty() ? cause : key + ": " + cause;
}
}  // namespace

Error::Error(ErrorKind kind, std::string cause, std::string key, std::shared_ptr<const ErrorAttachment> attachment)
    : std::runtime_error(format_message(cause, key)),
      kind_(kind),
      cause_(std::move(cause)),
      key_(std::move(key)),
      attachment_(std::move(attachment)) {}

Error Error::with_key(std::string key) const {
  if (!key_.empty()) return *this;
  return Error(kind_, cause_, std::move(key), attachment_);
}

}  // namespace conveyor
