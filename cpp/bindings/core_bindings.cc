#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "conveyor/core/cancellation.h"
#include "conveyor/core/geometry.h"
#include "conveyor/core/rng.h"
#include "conveyor/core/sample_transform.h"
#include "conveyor/core/thread_pool.h"

namespace nb = nanobind;

namespace conveyor::bindings {

void bind_core(nb::module_& m) {
  nb::class_<SampleTransform>(m, "SampleTransform")
      .def_prop_ro("sample_shape", [](const SampleTransform& t) { return t.output_spec().shape; })
      .def_prop_ro("dtype", [](const SampleTransform& t) { return std::string(dtype_name(t.output_spec().dtype)); });
  nb::class_<BoundingBox>(m, "BoundingBox")
      .def(
          "__init__",
          [](BoundingBox* self, float x, float y, float width, float height, int64_t category) {
            new (self) BoundingBox{x, y, width, height, category};
          },
          nb::arg("x"), nb::arg("y"), nb::arg("width"), nb::arg("height"), nb::arg("category"))
      .def_ro("x", &BoundingBox::x)
      .def_ro("y", &BoundingBox::y)
      .def_ro("width", &BoundingBox::width)
      .def_ro("height", &BoundingBox::height)
      .def_ro("category", &BoundingBox::category)
      .doc() = "An object's box in pixels (COCO's x, y, width, height) and its category.";
  nb::class_<Cancellation>(m, "Cancellation")
      .def(nb::init<>())
      .def("cancel", &Cancellation::cancel)
      .def_prop_ro("cancelled", &Cancellation::cancelled)
      .doc() = "A one-way flag that ends the engine's waits (requests, backoffs) of the calls made under it.";
  m.def(
      "call_with_cancellation",
      [](const Cancellation& cancellation, const nb::callable& call) {
        const ScopedCancellation scope(cancellation);
        return call();
      },
      nb::arg("cancellation"), nb::arg("call"),
      "call() with `cancellation` the calling thread's: cancel() ends its engine calls' network waits.");
  m.def("default_cpu_threads", &ThreadPool::default_cpu_threads);
  m.def("random_permutation", &random_permutation, nb::arg("n"), nb::arg("seed"), nb::arg("epoch"),
        nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace conveyor::bindings
