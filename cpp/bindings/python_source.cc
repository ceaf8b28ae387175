#include "python_source.h"

#include <nanobind/stl/string.h>

#include <cstring>
#include <utility>
#include <vector>

#include "bindings.h"
#include "conveyor/core/error.h"

namespace nb = nanobind;

namespace conveyor::bindings {

namespace {

// Copies a bytes-like object; throws Error{kRead} naming `key` otherwise.
Bytes copy_bytes(nb::handle object, const std::string& key) {
  if (PyUnicode_Check(object.ptr()) || !PyObject_CheckBuffer(object.ptr())) {
    throw Error(ErrorKind::kRead,
                std::string("__getitem__ returned ") + Py_TYPE(object.ptr())->tp_name +
                    "; expected bytes (or a bytes-like object) or a (bytes, label) pair",
                key);
  }
  Py_buffer view;
  if (PyObject_GetBuffer(object.ptr(), &view, PyBUF_SIMPLE) != 0) {
    nb::python_error error;
    throw Error(ErrorKind::kRead, "__getitem__ returned an unusable buffer: " + describe_exception(error.value()), key);
  }
  std::vector<uint8_t> data(static_cast<const uint8_t*>(view.buf),
                            static_cast<const uint8_t*>(view.buf) + static_cast<size_t>(view.len));
  PyBuffer_Release(&view);
  return Bytes::from_vector(std::move(data));
}

}  // namespace

PythonSource::PythonSource(nb::object dataset, nb::object encode)
    : dataset_(std::move(dataset)), encode_(std::move(encode)) {
  name_ =
      nb::borrow<nb::str>(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(dataset_.ptr()))).attr("__name__")).c_str();
  check_config(nb::hasattr(dataset_, "__getitem__"), "PythonSource: " + name_ + " has no __getitem__");
  const Py_ssize_t n = PyObject_Length(dataset_.ptr());
  if (n < 0) throw nb::python_error();
  size_ = static_cast<int64_t>(n);
}

PythonSource::~PythonSource() = default;

std::string PythonSource::key(int64_t index) const { return name_ + "[" + std::to_string(index) + "]"; }

Record PythonSource::read(int64_t index) const {
  const std::string sample = key(index);
  // Declared before the try: the Python error objects below are released
  // while the GIL is still held.
  TimedGilAcquire gil;
  if (!dataset_.is_valid()) throw Error(ErrorKind::kRead, "the dataset was released (garbage collected)", sample);
  try {
    nb::object item = dataset_[nb::int_(index)];
    nb::handle data = item;
    int64_t label = -1;
    if (PyTuple_Check(item.ptr())) {
      if (PyTuple_GET_SIZE(item.ptr()) != 2) {
        throw Error(ErrorKind::kRead,
                    "__getitem__ returned a tuple of " + std::to_string(PyTuple_GET_SIZE(item.ptr())) +
                        " items; expected bytes or a (bytes, label) pair",
                    sample);
      }
      data = PyTuple_GET_ITEM(item.ptr(), 0);
      nb::handle label_object = PyTuple_GET_ITEM(item.ptr(), 1);
      // A bool is an int to Python (True == 1); as a label it is a mistake, as
      // FileList and ArraySource refuse it.
      if (PyBool_Check(label_object.ptr())) {
        throw Error(ErrorKind::kRead,
                    std::string("the label returned by __getitem__ is a bool (") +
                        (label_object.ptr() == Py_True ? "True" : "False") + "), not an integer",
                    sample);
      }
      nb::object integer = nb::steal(PyNumber_Index(label_object.ptr()));
      if (!integer.is_valid()) {
        nb::python_error error;
        throw Error(ErrorKind::kRead,
                    "the label returned by __getitem__ is not an integer: " + describe_exception(error.value()),
                    sample);
      }
      int overflow = 0;
      label = PyLong_AsLongLongAndOverflow(integer.ptr(), &overflow);
      if (overflow != 0) {
        throw Error(ErrorKind::kRead,
                    "the label returned by __getitem__ (" + std::string(nb::str(integer).c_str()) +
                        ") is out of the int64 range",
                    sample);
      }
      if (label == -1 && PyErr_Occurred()) {
        nb::python_error error;
        throw Error(ErrorKind::kRead, "bad label: " + describe_exception(error.value()), sample);
      }
    }
    // A decoded image (or anything but bytes) is encoded first, when asked.
    nb::object encoded;
    if (encode_.is_valid() && !encode_.is_none() && !PyBytes_Check(data.ptr()) && !PyByteArray_Check(data.ptr()) &&
        !PyMemoryView_Check(data.ptr())) {
      try {
        encoded = encode_(data);
      } catch (nb::python_error& e) {
        // Its message says what __getitem__ returned and what it should.
        throw Error(ErrorKind::kRead, nb::str(e.value()).c_str(), sample);
      }
      data = encoded;
    }
    return Record{copy_bytes(data, sample), label, sample};
  } catch (nb::python_error& e) {
    std::string cause = "__getitem__(" + std::to_string(index) + ") raised " + describe_exception(e.value());
    // Keep the exception object so that the Python side can chain it; failing
    // to do so only loses the traceback, not the error.
    try {
      nb::module_::import_("conveyor.errors").attr("_remember_cause")(nb::str(sample.c_str()), e.value());
    } catch (const std::exception&) {
    }
    throw Error(ErrorKind::kRead, std::move(cause), sample);
  }
}

}  // namespace conveyor::bindings
