#pragma once

#include <string_view>

namespace conveyor {

/// The library's version, "major.minor.patch": project() in CMakeLists.txt,
/// the one place it is written (the Python package and its wheel read it
/// from there). Thread-safe.
std::string_view version();

}  // namespace conveyor
