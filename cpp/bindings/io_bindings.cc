#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "conveyor/io/source.h"

namespace nb = nanobind;

namespace conveyor::bindings {

void bind_io(nb::module_& m) {
  nb::class_<Source>(m, "Source")
      .def("__len__", &Source::size)
      .def("key", &Source::key, nb::arg("index"))
      .def(
          "read",
          [](const Source& source, int64_t index) {
            Record record;
            {
              nb::gil_scoped_release release;
              record = source.read(index);
            }
            return nb::make_tuple(nb::bytes(reinterpret_cast<const char*>(record.data.data()), record.data.size()),
                                  record.label, record.key);
          },
          nb::arg("index"), "Reads one sample: (bytes, label, key).");
  nb::class_<FileSource, Source>(m, "FileSource")
      .def(nb::init<std::vector<std::string>, std::vector<int64_t>>(), nb::arg("paths"),
           nb::arg("labels") = std::vector<int64_t>{});
}

}  // namespace conveyor::bindings
