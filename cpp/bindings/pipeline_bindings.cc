#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>

#include "bindings.h"
#include "conveyor/pipeline/loader.h"

namespace nb = nanobind;

namespace conveyor::bindings {

namespace {

nb::dlpack::dtype to_dlpack(DType dtype) {
  switch (dtype) {
    case DType::kUInt8:
      return nb::dtype<uint8_t>();
    case DType::kInt64:
      return nb::dtype<int64_t>();
    case DType::kFloat16:
      return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case DType::kFloat32:
      return nb::dtype<float>();
    case DType::kBFloat16:
      return {static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
  }
  return nb::dtype<uint8_t>();
}

// A DLPack-capable array viewing `data`; the capsule keeps the batch (and so
// its pooled buffer) alive until the last tensor using the memory is freed.
// Only the images view the batch: everything small is copied (owned_array),
// so that holding it does not hold the buffer.
nb::ndarray<> view(const std::shared_ptr<Batch>& batch, void* data, const std::vector<int64_t>& shape, DType dtype) {
  std::vector<size_t> dims(shape.begin(), shape.end());
  auto* holder = new std::shared_ptr<Batch>(batch);
  nb::capsule owner(holder, [](void* p) noexcept { delete static_cast<std::shared_ptr<Batch>*>(p); });
  return nb::ndarray<>(data, dims.size(), dims.data(), owner, nullptr, to_dlpack(dtype));
}

// A numpy array owning `data`.
template <typename T>
nb::ndarray<nb::numpy, T> owned_array(std::vector<T> data, std::initializer_list<size_t> shape) {
  auto* owned = new std::vector<T>(std::move(data));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), shape.size(), shape.begin(), owner);
}

// Batch memory from two Python callables (e.g. torch's pinned allocator). They
// are called from engine threads and from destructors, so each call takes the
// GIL, and a Python exception never propagates as one: allocate's becomes an
// Error (next() raises it), deallocate's goes to sys.unraisablehook (it runs
// in destructors, where an exception would terminate the process).
BufferAllocator python_allocator(nb::handle allocator) {
  using Pair = std::pair<nb::callable, nb::callable>;
  Pair pair;
  if (!nb::try_cast(allocator, pair)) {
    throw Error(ErrorKind::kConfig,
                "allocator must be a pair (allocate(nbytes) -> address, deallocate(address, nbytes))");
  }
  // Released with the GIL held, wherever the last copy of the allocator goes.
  auto functions = std::shared_ptr<Pair>(new Pair(std::move(pair)), [](Pair* p) {
    nb::gil_scoped_acquire gil;
    delete p;
  });
  return {[functions](size_t bytes) -> void* {
            nb::gil_scoped_acquire gil;
            const std::string call = "allocator: allocate(" + std::to_string(bytes) + ")";
            nb::object result;
            try {
              result = functions->first(bytes);
            } catch (nb::python_error& e) {
              throw Error(ErrorKind::kInternal, call + " raised " + describe_exception(e.value()));
            }
            uintptr_t address = 0;
            if (nb::try_cast(result, address, /*convert=*/false) && address != 0) {
              return reinterpret_cast<void*>(address);
            }
            // allocate returned: a failing __repr__ must not read as if it raised.
            std::string shown;
            try {
              shown = nb::repr(result).c_str();
            } catch (nb::python_error& e) {
              shown = std::string("a ") + Py_TYPE(result.ptr())->tp_name + " (its repr raised " +
                      describe_exception(e.value()) + ")";
            }
            throw Error(ErrorKind::kInternal, call + " returned " + shown + ", not a non-zero int address");
          },
          [functions](void* data, size_t bytes) noexcept {
            nb::gil_scoped_acquire gil;
            // A destructor may run while a Python exception is pending (an
            // object freed during unwinding): keep it out of this call.
            nb::error_scope pending;
            try {
              functions->second(reinterpret_cast<uintptr_t>(data), bytes);
            } catch (nb::python_error& e) {
              e.discard_as_unraisable(functions->second);
            } catch (const std::exception& e) {
              PyErr_SetString(PyExc_RuntimeError, e.what());
              PyErr_WriteUnraisable(functions->second.ptr());
            }
          }};
}

// The Loader as Python owns it. Python destroys it holding the GIL, and
// closing joins engine threads that may be waiting for the GIL (a PythonSource
// read, a Python allocator), so close with the GIL released first; ~Loader
// then finds nothing left to join and releases the source with the GIL held.
class PythonOwnedLoader final : public Loader {
 public:
  using Loader::Loader;
  ~PythonOwnedLoader() {
    if (on_own_thread()) return;  // ~Loader says why it cannot go on (the Python layer avoids it).
    nb::gil_scoped_release release;
    close();
  }
  PythonOwnedLoader(const PythonOwnedLoader&) = delete;
  PythonOwnedLoader& operator=(const PythonOwnedLoader&) = delete;
};

}  // namespace

void bind_pipeline(nb::module_& m) {
  nb::class_<Batch>(m, "Batch")
      .def_prop_ro("index", &Batch::index)
      .def_prop_ro("size", &Batch::size)
      .def_prop_ro("end_position", &Batch::end_position)
      .def_prop_ro("address", [](const Batch& b) { return reinterpret_cast<uintptr_t>(b.data()); })
      .def_prop_ro("shape", &Batch::shape)
      .def_static(
          "images",
          [](const std::shared_ptr<Batch>& b) { return view(b, b->data(), b->shape(), b->sample_spec().dtype); },
          nb::arg("batch"), "The samples as a DLPack array sharing the batch's memory.")
      .def_prop_ro("variable_shape", &Batch::variable_shape)
      .def_static(
          "sample_images",
          [](const std::shared_ptr<Batch>& b) {
            nb::list images;
            for (const SampleOutput& s : b->samples())
              images.append(view(b, s.buffer.data(), s.spec.shape, s.spec.dtype));
            return images;
          },
          nb::arg("batch"),
          "A variable-shape batch's samples: a list of DLPack arrays, each sharing its sample's memory.")
      .def_static(
          "labels", [](const Batch& b) { return owned_array(b.labels(), {static_cast<size_t>(b.size())}); },
          nb::arg("batch"),
          "The labels as an int64 numpy array of their own (holding it does not hold the batch's memory).")
      .def_static(
          "boxes",
          [](const Batch& b) {
            FlatBoxes flat = b.flat_boxes();
            const size_t samples = flat.counts.size(), total = flat.categories.size();
            return nb::make_tuple(owned_array(std::move(flat.counts), {samples}),
                                  owned_array(std::move(flat.coords), {total, 4}),
                                  owned_array(std::move(flat.categories), {total}));
          },
          nb::arg("batch"),
          "(counts per sample, float32 boxes K×4 xywh, int64 categories K), numpy arrays of their own.")
      .def_static(
          "soft_labels",
          [](const Batch& b) -> nb::object {
            if (b.num_classes() == 0) return nb::none();
            return nb::cast(
                owned_array(b.soft_labels(), {static_cast<size_t>(b.size()), static_cast<size_t>(b.num_classes())}));
          },
          nb::arg("batch"),
          "After a batch mix, the N×num_classes float32 mixed labels (a numpy array of its own); else None.");

  nb::class_<SkippedSample>(m, "SkippedSample")
      .def_ro("position", &SkippedSample::position)
      .def_ro("key", &SkippedSample::key)
      .def_ro("cause", &SkippedSample::cause);

  nb::enum_<OnError>(m, "OnError", "conveyor::OnError: what the Loader does with a sample that fails.")
      .value("RAISE", OnError::kRaise)
      .value("SKIP", OnError::kSkip);

  // Every field but the allocator, which is passed to Loader (a Python pair
  // becomes a BufferAllocator here).
  nb::class_<LoaderOptions>(m, "LoaderOptions", "conveyor::LoaderOptions (pipeline/loader.h) but the allocator.")
      .def(nb::init<>())
      .def_rw("batch_size", &LoaderOptions::batch_size)
      .def_rw("shuffle", &LoaderOptions::shuffle)
      .def_rw("shuffle_buffer", &LoaderOptions::shuffle_buffer)
      .def_rw("seed", &LoaderOptions::seed)
      .def_rw("drop_last", &LoaderOptions::drop_last)
      .def_rw("threads", &LoaderOptions::threads)
      .def_rw("io_threads", &LoaderOptions::io_threads)
      .def_rw("prefetch", &LoaderOptions::prefetch)
      .def_rw("memory_budget", &LoaderOptions::memory_budget)
      .def_rw("on_error", &LoaderOptions::on_error)
      .def_rw("rank", &LoaderOptions::rank)
      .def_rw("world_size", &LoaderOptions::world_size)
      .def_rw("local_processes", &LoaderOptions::local_processes)
      .def_rw("batch_mix", &LoaderOptions::batch_mix);

  nb::class_<LoaderStats>(m, "LoaderStats", "conveyor::LoaderStats (pipeline/loader.h): Loader.stats().")
      .def_ro("epoch", &LoaderStats::epoch)
      .def_ro("samples_read", &LoaderStats::samples_read)
      .def_ro("samples_processed", &LoaderStats::samples_processed)
      .def_ro("batches_delivered", &LoaderStats::batches_delivered)
      .def_ro("skipped", &LoaderStats::skipped)
      .def_ro("read_seconds", &LoaderStats::read_seconds)
      .def_ro("process_seconds", &LoaderStats::process_seconds)
      .def_ro("read_cpu_seconds", &LoaderStats::read_cpu_seconds)
      .def_ro("read_lock_wait_seconds", &LoaderStats::read_lock_wait_seconds)
      .def_ro("read_queue_wait_seconds", &LoaderStats::read_queue_wait_seconds)
      .def_ro("process_cpu_seconds", &LoaderStats::process_cpu_seconds)
      .def_ro("wait_seconds", &LoaderStats::wait_seconds)
      .def_ro("wall_seconds", &LoaderStats::wall_seconds)
      .def_ro("batches_ready", &LoaderStats::batches_ready)
      .def_ro("batches_in_flight", &LoaderStats::batches_in_flight)
      .def_ro("buffers_allocated", &LoaderStats::buffers_allocated)
      .def_ro("buffers_leased", &LoaderStats::buffers_leased)
      .def_ro("samples_per_part", &LoaderStats::samples_per_part)
      .def_ro("threads", &LoaderStats::threads)
      .def_ro("io_threads", &LoaderStats::io_threads)
      .def_ro("prefetch", &LoaderStats::prefetch)
      .def_ro("threads_running", &LoaderStats::threads_running)
      .def_ro("io_threads_running", &LoaderStats::io_threads_running)
      .def_ro("threads_auto", &LoaderStats::threads_auto)
      .def_ro("io_threads_auto", &LoaderStats::io_threads_auto)
      .def_ro("prefetch_auto", &LoaderStats::prefetch_auto)
      .def_ro("autotune_reason", &LoaderStats::autotune_reason)
      .def_ro("autotune_changes", &LoaderStats::autotune_changes)
      .def_ro("demand_per_second", &LoaderStats::demand_per_second)
      .def_ro("read_latency_seconds", &LoaderStats::read_latency_seconds)
      .def_ro("process_time_seconds", &LoaderStats::process_time_seconds)
      .def_ro("latency_spread_seconds", &LoaderStats::latency_spread_seconds)
      .def_ro("usable_cores", &LoaderStats::usable_cores)
      .def_ro("usable_cores_source", &LoaderStats::usable_cores_source)
      .def_ro("other_cores", &LoaderStats::other_cores)
      .def_ro("memory_budget", &LoaderStats::memory_budget);

  nb::class_<PythonOwnedLoader>(m, "Loader")
      .def(
          "__init__",
          [](PythonOwnedLoader* self, std::shared_ptr<Source> source, std::shared_ptr<SampleTransform> transform,
             LoaderOptions options, nb::handle allocator) {
            if (!allocator.is_none()) options.allocator = python_allocator(allocator);
            new (self) PythonOwnedLoader(std::move(source), std::move(transform), std::move(options));
          },
          nb::arg("source"), nb::arg("transform"), nb::arg("options"), nb::kw_only(), nb::arg("allocator") = nb::none(),
          "allocator: optional (allocate(nbytes) -> address, deallocate(address, nbytes)) for batch memory.")
      .def_ro_static("MAX_EPOCH", &Loader::kMaxEpoch)
      .def_prop_ro("num_samples", &Loader::num_samples)
      .def_prop_ro("num_batches", &Loader::num_batches)
      .def("batches_after", &Loader::batches_after, nb::arg("position"), nb::arg("segment_start"))
      .def_prop_ro("threads", [](const PythonOwnedLoader& l) { return l.options().threads; })
      .def_prop_ro("io_threads", [](const PythonOwnedLoader& l) { return l.options().io_threads; })
      .def("segment_samples", &Loader::segment_samples, nb::arg("segment_start"))
      .def(
          "saved_position",
          [](const PythonOwnedLoader& l, int64_t epoch, int64_t position, int64_t batch, int64_t segment_start,
             int64_t order_world_size) {
            const SavedPosition saved = l.saved_position({epoch, position, batch, segment_start, order_world_size});
            return nb::make_tuple(saved.epoch, saved.position, saved.batch, *saved.world_size, saved.segment_start,
                                  saved.order_world_size, *saved.samples);
          },
          nb::arg("epoch"), nb::arg("position"), nb::arg("batch"), nb::arg("segment_start"),
          nb::arg("order_world_size"),
          "(epoch, global position, batch, world_size, segment_start, order_world_size or None, samples) of "
          "this rank at `position` of its order.")
      .def(
          "resume_point",
          [](const PythonOwnedLoader& l, int64_t epoch, int64_t position, int64_t batch,
             std::optional<int64_t> world_size, int64_t segment_start, std::optional<int64_t> order_world_size,
             std::optional<int64_t> samples) {
            const EpochStart start =
                l.resume_point({epoch, position, batch, world_size, segment_start, order_world_size, samples});
            return nb::make_tuple(start.epoch, start.position, start.batch, start.segment_start,
                                  start.order_world_size);
          },
          nb::arg("epoch"), nb::arg("position"), nb::arg("batch"), nb::arg("world_size").none(),
          nb::arg("segment_start"), nb::arg("order_world_size").none(), nb::arg("samples").none(),
          "Where this rank resumes a saved epoch: (epoch, position in its order, batch, segment_start, "
          "order_world_size); "
          "ConfigError naming the key when the state cannot come from this loader.")
      .def("start_epoch", &Loader::start_epoch, nb::arg("epoch"), nb::arg("start_position") = 0,
           nb::arg("start_batch") = 0, nb::arg("segment_start") = 0, nb::arg("order_world_size") = 0,
           nb::call_guard<nb::gil_scoped_release>())
      .def(
          "next",
          [](PythonOwnedLoader& loader, double timeout_seconds) -> nb::object {
            NextResult result;
            {
              nb::gil_scoped_release release;
              result = loader.next(std::chrono::duration<double>(timeout_seconds));
            }
            switch (result.status) {
              case NextResult::Status::kBatch:
                return nb::cast(result.batch);
              case NextResult::Status::kEnd:
                return nb::none();
              case NextResult::Status::kTimeout:
                return nb::bool_(false);
            }
            return nb::none();
          },
          nb::arg("timeout"),
          "The next Batch, None at the end of the epoch, False when `timeout` seconds passed first (negative, "
          "NaN, infinite or huge: no limit).")
      .def("stop", &Loader::stop, nb::call_guard<nb::gil_scoped_release>())
      .def("close", &Loader::close, nb::call_guard<nb::gil_scoped_release>())
      .def("skipped", &Loader::skipped, nb::call_guard<nb::gil_scoped_release>())
      .def("on_own_thread", &Loader::on_own_thread,
           "True when called from one of the loader's own threads (its source's read, a transform).")
      .def("check_not_reentered", &Loader::check_not_reentered, nb::arg("call"),
           "Raises ConfigError naming `call` when called from one of the loader's own threads.")
      .def("set_parallelism", &Loader::set_parallelism, nb::arg("threads") = 0, nb::arg("io_threads") = 0,
           nb::arg("prefetch") = 0, nb::call_guard<nb::gil_scoped_release>(),
           "Sets the pools and prefetch now (0 leaves one as it is); autotune may change the ones it tunes.")
      .def("autotune_trace", &Loader::autotune_trace, nb::call_guard<nb::gil_scoped_release>(),
           "Autotune's decision lines since the last call, oldest first.")
      // The engine's lock may be held by a thread waiting for the GIL (a
      // Python allocator or source), so never wait for it holding the GIL.
      .def("stats", &Loader::stats, nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace conveyor::bindings
