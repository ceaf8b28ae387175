#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "conveyor/core/rng.h"
#include "conveyor/core/sample_transform.h"
#include "conveyor/core/thread_pool.h"

namespace nb = nanobind;

namespace conveyor::bindings {

void bind_core(nb::module_& m) {
  nb::class_<SampleTransform>(m, "SampleTransform")
      .def_prop_ro("sample_shape", [](const SampleTransform& t) { return t.output_spec().shape; })
      .def_prop_ro("dtype", [](const SampleTransform& t) { return std::string(dtype_name(t.output_spec().dtype)); });
  m.def("default_cpu_threads", &ThreadPool::default_cpu_threads);
  m.def("random_permutation", &random_permutation, nb::arg("n"), nb::arg("seed"), nb::arg("epoch"),
        nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace conveyor::bindings
