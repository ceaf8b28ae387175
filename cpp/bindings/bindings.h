#pragma once

#include <nanobind/nanobind.h>

namespace conveyor::bindings {

// One function per C++ layer, each in <layer>_bindings.cc.
void bind_core(nanobind::module_& m);
void bind_io(nanobind::module_& m);
void bind_ops(nanobind::module_& m);
void bind_pipeline(nanobind::module_& m);

}  // namespace conveyor::bindings
