#include "conveyor/core/environment.h"

#include <cstdlib>
#include <utility>

namespace conveyor {

std::optional<std::string> process_env(const std::string& name) {
  const char* value = std::getenv(name.c_str());  // NOLINT(concurrency-mt-unsafe): read once, at construction.
  return value == nullptr ? std::nullopt : std::optional<std::string>(value);
}

std::optional<std::string> nonempty(std::optional<std::string> value) {
  return value && !value->empty() ? std::move(value) : std::nullopt;
}

}  // namespace conveyor
