// The extension module conveyor._conveyor: argument conversion, GIL release
// and error translation only. Logic lives in the C++ layers or in python/.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "bindings.h"
#include "conveyor/core/error.h"

namespace nb = nanobind;

NB_MODULE(_conveyor, m) {
  m.doc() = "conveyor's C++ engine (internal; use the conveyor package)";
  // Objects still referenced at interpreter exit (e.g. by the traceback of an
  // uncaught error) are not leaks worth a page of warnings to the user.
  nb::set_leak_warnings(false);

  // conveyor::Error becomes the matching class of conveyor.errors, the one
  // place where C++ errors are translated.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const conveyor::Error& e) {
      nb::object errors = nb::module_::import_("conveyor.errors");
      nb::object error =
          errors.attr("_from_engine")(std::string(conveyor::error_kind_name(e.kind())), e.cause(), e.key());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
    }
  });

  conveyor::bindings::bind_core(m);
  conveyor::bindings::bind_io(m);
  conveyor::bindings::bind_ops(m);
  conveyor::bindings::bind_pipeline(m);
}
