#include "python_remote_store.h"

#include <nanobind/stl/string.h>

#include <string_view>
#include <utility>

#include "bindings.h"

namespace nb = nanobind;

namespace conveyor::bindings {

namespace {

FetchFailure::Kind kind_named(std::string_view name) {
  using Kind = FetchFailure::Kind;
  if (name == "status") return Kind::kStatus;
  if (name == "timeout") return Kind::kTimeout;
  if (name == "connection") return Kind::kConnection;
  if (name == "not_found") return Kind::kNotFound;
  if (name == "permission") return Kind::kPermission;
  if (name == "invalid") return Kind::kInvalid;
  if (name == "cancelled") return Kind::kCancelled;
  if (name == "too_large") return Kind::kTooLarge;
  return Kind::kOther;
}

// A failure tuple (kind, status, message) as a FetchError; needs the GIL.
[[noreturn]] void throw_failure(nb::handle result) {
  nb::tuple failure = nb::borrow<nb::tuple>(result);
  throw FetchError(
      {kind_named(nb::cast<std::string>(failure[0])), nb::cast<int>(failure[1]), nb::cast<std::string>(failure[2])});
}

// Runs `call` with the GIL (its wait counted as the read's lock wait); an
// exception escaping Python is a kOther failure.
template <class Call>
auto with_gil(Call&& call) {
  TimedGilAcquire gil;
  try {
    return call();
  } catch (nb::python_error& e) {
    throw FetchError({FetchFailure::Kind::kOther, 0, describe_exception(e.value())});
  } catch (const nb::cast_error&) {
    throw FetchError({FetchFailure::Kind::kOther, 0, "the remote store returned an unexpected value"});
  }
}

}  // namespace

std::vector<uint8_t> PythonRemoteStore::read(const std::string& url, uint64_t offset, int64_t size) const {
  return with_gil([&] {
    nb::object result = store_.attr("read")(url, offset, size);
    if (PyTuple_Check(result.ptr())) throw_failure(result);
    Py_buffer view;
    if (PyObject_GetBuffer(result.ptr(), &view, PyBUF_SIMPLE) != 0) throw nb::python_error();
    const auto* begin = static_cast<const uint8_t*>(view.buf);
    std::vector<uint8_t> data(begin, begin + view.len);
    PyBuffer_Release(&view);
    return data;
  });
}

uint64_t PythonRemoteStore::size(const std::string& url) const {
  return with_gil([&] {
    nb::object result = store_.attr("size")(url);
    if (PyTuple_Check(result.ptr())) throw_failure(result);
    return nb::cast<uint64_t>(result);
  });
}

RemoteObjectInfo PythonRemoteStore::fetch(const std::string& url, std::vector<uint8_t>* data, int64_t max_bytes) const {
  if (max_bytes < kMaxRemoteReadBytes) {
    try {
      const uint64_t declared = size(url);
      if (declared > static_cast<uint64_t>(std::max<int64_t>(0, max_bytes))) {
        throw FetchError({FetchFailure::Kind::kTooLarge, 0, std::to_string(declared) + " bytes"});
      }
    } catch (const FetchError& e) {
      // A backend that gives no size: the object is read, and its size checked after.
      if (e.failure().kind != FetchFailure::Kind::kOther) throw;
    }
  }
  return RemoteStore::fetch(url, data, max_bytes);
}

}  // namespace conveyor::bindings
