// The extension module conveyor._conveyor: argument conversion, GIL release
// and error translation only. Logic lives in the C++ layers or in python/.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "bindings.h"
#include "conveyor/core/error.h"
#include "conveyor/core/version.h"

namespace nb = nanobind;

namespace {

// Sets the Python error for `e`: the matching class of conveyor.errors.
void translate(const conveyor::Error& e) {
  nb::object errors = nb::module_::import_("conveyor.errors");
  // The key is a path or "shard.tar:member" as the OS gives it: decoded
  // as os.fsdecode does, so it equals the path Python listed even when
  // not UTF-8. The cause may quote untrusted bytes (tar member names).
  nb::object key = nb::steal(PyUnicode_DecodeFSDefaultAndSize(e.key().data(), static_cast<Py_ssize_t>(e.key().size())));
  nb::object cause =
      nb::steal(PyUnicode_DecodeUTF8(e.cause().data(), static_cast<Py_ssize_t>(e.cause().size()), "backslashreplace"));
  nb::object error = errors.attr("_from_engine")(std::string(conveyor::error_kind_name(e.kind())), cause, key);
  // A Python exception raised by a user callback (T.Lambda) rides along
  // with the error: it becomes the cause, with its traceback.
  if (const auto* raised = dynamic_cast<const conveyor::bindings::PythonExceptionAttachment*>(e.attachment().get())) {
    error.attr("__cause__") = raised->exception();
  }
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
}

}  // namespace

NB_MODULE(_conveyor, m) {
  m.doc() = "conveyor's C++ engine (internal; use the conveyor package)";
  m.attr("__version__") = std::string(conveyor::version());
  // Objects still referenced at interpreter exit (e.g. by the traceback of an
  // uncaught error) are not leaks worth a page of warnings to the user.
  nb::set_leak_warnings(false);

  // conveyor::Error becomes the matching class of conveyor.errors, the one
  // place where C++ errors are translated.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const conveyor::Error& e) {
      try {
        translate(e);
      } catch (nb::python_error& raised) {
        // Raised while translating (Ctrl-C pending: KeyboardInterrupt): that
        // exception goes on as it is, not wrapped in a RuntimeError.
        raised.restore();
      }
    }
  });

  conveyor::bindings::bind_core(m);
  conveyor::bindings::bind_io(m);
  conveyor::bindings::bind_ops(m);
  conveyor::bindings::bind_pipeline(m);
  conveyor::bindings::bind_cuda(m);
}
