#include <nanobind/nanobind.h>

#include "bindings.h"

namespace nb = nanobind;

namespace conveyor::bindings {

// ImagePipeline and its transform specs (filled in with cpp/conveyor/ops).
void bind_ops(nb::module_&) {}

}  // namespace conveyor::bindings
