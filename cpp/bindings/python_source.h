#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>

#include "conveyor/io/source.h"

namespace conveyor::bindings {

/// A Source over a Python map-style dataset: `len(dataset)` samples, and
/// `dataset[i]` returning a bytes-like object (bytes, bytearray, memoryview, a
/// contiguous array) or a `(bytes_like, label)` pair. With `encode`, anything
/// else it returns as the image (bytes, bytearray and memoryview excepted:
/// a decoded image, an array) goes through `encode(image) -> bytes` first. It lives in the bindings
/// because it holds Python objects; the core never includes Python headers.
///
/// read() is called from the io pool without the GIL: it takes the GIL only
/// for the `__getitem__` call and the copy of the result, so as many calls are
/// in flight as there are io threads whenever `__getitem__` releases the GIL
/// (I/O, time.sleep, C extensions).
///
/// A Python exception raised by `__getitem__` becomes Error{kRead} whose cause
/// names the exception type, its message and the index; the exception object
/// itself is handed to conveyor.errors so that the ReadError raised in Python
/// has it as `__cause__` (with its traceback).
///
/// Ownership: holds a reference to `dataset`; must be created and destroyed
/// with the GIL held (true when owned by its Python object).
class PythonSource final : public Source {
 public:
  /// Calls len(dataset) once; the length is fixed from then on. Throws
  /// Error{kConfig} when it is negative or `dataset` has no `__getitem__`.
  /// `encode` may be None.
  explicit PythonSource(nanobind::object dataset, nanobind::object encode = nanobind::none());
  ~PythonSource() override;

  int64_t size() const override { return size_; }
  Record read(int64_t index) const override;
  /// "<type name>[<index>]", e.g. "MyDataset[17]".
  std::string key(int64_t index) const override;

  const nanobind::object& dataset() const noexcept { return dataset_; }
  const nanobind::object& encode() const noexcept { return encode_; }
  /// Drops the references to the dataset and `encode` (the garbage
  /// collector's tp_clear); reads fail from then on. Needs the GIL.
  void clear() noexcept {
    dataset_.reset();
    encode_.reset();
  }

 private:
  nanobind::object dataset_;
  nanobind::object encode_;
  std::string name_;
  int64_t size_ = 0;
};

}  // namespace conveyor::bindings
