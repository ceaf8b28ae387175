#include "conveyor/core/version.h"

namespace conveyor {

std::string_view version() { return CONVEYOR_VERSION; }

}  // namespace conveyor
