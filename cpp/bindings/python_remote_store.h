#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>
#include <vector>

#include "conveyor/io/remote.h"

namespace conveyor::bindings {

/// A RemoteStore over a Python object (conveyor.sources.remote's fsspec
/// store): `store.read(url, offset, size)` returns the bytes, and
/// `store.size(url)` the size, or either returns a failure tuple
/// `(kind, status, message)`, kind one of "status", "timeout", "connection",
/// "not_found", "permission", "invalid", "cancelled", "other"; it becomes a
/// FetchError, and the io layer decides whether to retry (is_transient). An
/// exception escaping the object is a failure of kind "other".
///
/// Called from the io threads without the GIL: each call takes the GIL only
/// while Python runs and the result is copied (fsspec itself waits for the
/// network with the GIL released, so as many requests are in flight as io
/// threads call).
///
/// Ownership: holds a reference to `store`; created and destroyed with the GIL
/// held (true when owned by its Python object).
class PythonRemoteStore final : public RemoteStore {
 public:
  explicit PythonRemoteStore(nanobind::object store) : store_(std::move(store)) {}

  std::vector<uint8_t> read(const std::string& url, uint64_t offset, int64_t size) const override;
  uint64_t size(const std::string& url) const override;
  /// Asks the size first when `max_bytes` is below kMaxRemoteReadBytes (a
  /// shard's index; a small cache): fsspec reads a whole object at once, so
  /// one larger is refused (kTooLarge) before it is read.
  RemoteObjectInfo fetch(const std::string& url, std::vector<uint8_t>* data, int64_t max_bytes) const override;

 private:
  nanobind::object store_;
};

}  // namespace conveyor::bindings
