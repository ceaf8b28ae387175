#pragma once

#include <functional>
#include <optional>
#include <string>

namespace conveyor {

/// Reads an environment variable: the process environment by default; tests
/// pass their own. Thread-safe when the function it holds is.
using GetEnv = std::function<std::optional<std::string>(const std::string& name)>;

/// The process environment, as GetEnv. Not thread-safe against setenv():
/// read once, where an object is constructed.
std::optional<std::string> process_env(const std::string& name);

/// `value` when it is set and not empty: a variable set to "" counts as
/// unset, as the AWS tools and most programs take it.
std::optional<std::string> nonempty(std::optional<std::string> value);

}  // namespace conveyor
