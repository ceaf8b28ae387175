#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>
#include <utility>

#include "conveyor/core/cpu_time.h"
#include "conveyor/core/error.h"

namespace conveyor::bindings {

// One function per C++ layer, each in <layer>_bindings.cc.
void bind_core(nanobind::module_& m);
void bind_io(nanobind::module_& m);
void bind_ops(nanobind::module_& m);
void bind_pipeline(nanobind::module_& m);
void bind_cuda(nanobind::module_& m);

// A Python exception carried by a conveyor::Error from the engine thread
// where a user callback raised it to the translator, which makes it the
// raised error's __cause__ (with its traceback). Create it with the GIL held;
// it may be destroyed on any thread: it takes the GIL to release the object,
// unless the interpreter is gone (then the object is leaked, not touched).
class PythonExceptionAttachment final : public ErrorAttachment {
 public:
  explicit PythonExceptionAttachment(nanobind::object exception) : exception_(std::move(exception)) {}
  ~PythonExceptionAttachment() override {
    if (!Py_IsInitialized()) {
      (void)exception_.release();
      return;
    }
    nanobind::gil_scoped_acquire gil;
    exception_.reset();
  }
  PythonExceptionAttachment(const PythonExceptionAttachment&) = delete;
  PythonExceptionAttachment& operator=(const PythonExceptionAttachment&) = delete;

  const nanobind::object& exception() const noexcept { return exception_; }

 private:
  nanobind::object exception_;
};

// Acquires the GIL (as nanobind::gil_scoped_acquire, released when it goes
// out of scope) and adds the time it waited for it to the thread's lock wait
// (core/cpu_time.h), which the Loader reads around each read: autotune tells
// reads that queue for the GIL from reads that wait for storage. For calls
// into Python made by a read on a loader thread.
class TimedGilAcquire {
 public:
  TimedGilAcquire() : asked_ns_(steady_ns()) { add_thread_lock_wait_ns(steady_ns() - asked_ns_); }
  TimedGilAcquire(const TimedGilAcquire&) = delete;
  TimedGilAcquire& operator=(const TimedGilAcquire&) = delete;

 private:
  int64_t asked_ns_;  // Declared first: read before gil_ is acquired.
  nanobind::gil_scoped_acquire gil_;
};

// "TypeName: message" of a Python exception object; needs the GIL. Never
// throws: a failing str() leaves just the type name.
inline std::string describe_exception(nanobind::handle exception) {
  std::string text = Py_TYPE(exception.ptr())->tp_name;
  try {
    nanobind::str message = nanobind::str(exception);
    if (PyUnicode_GetLength(message.ptr()) > 0) text += std::string(": ") + message.c_str();
  } catch (const nanobind::python_error&) {
    text += ": <str() of the exception failed>";
  }
  return text;
}

}  // namespace conveyor::bindings
