#include "python_function.h"

#include <nanobind/ndarray.h>

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "bindings.h"
#include "conveyor/core/error.h"
#include "conveyor/ops/transforms/function.h"

namespace nb = nanobind;

namespace conveyor::bindings {

namespace {

using Pixels = std::vector<uint8_t>;
using Result = nb::ndarray<const uint8_t, nb::ndim<3>, nb::c_contig, nb::device::cpu>;

// Released with the GIL held wherever the last copy of the callback goes.
std::shared_ptr<nb::object> held(nb::object object) {
  return std::shared_ptr<nb::object>(new nb::object(std::move(object)), [](nb::object* p) {
    if (!Py_IsInitialized()) {
      (void)p->release();  // The interpreter is gone: nothing left to release.
    } else {
      nb::gil_scoped_acquire gil;
      p->reset();
    }
    delete p;
  });
}

// Engine threads call Python once per sample. On a thread without a Python
// thread state, every PyGILState_Ensure creates one and the matching
// PyGILState_Release deletes it again (several µs per call); this keeps one
// per engine thread from its first call until the thread ends. Its
// destructor runs at thread exit, when the pool joins its threads, and takes
// the GIL: no joiner may hold the GIL or wait for it. close() and
// ~PythonOwnedLoader release the GIL before they join; a shrink (autotune,
// set_parallelism) joins under the loader's lock, which no thread waits for
// holding the GIL (every binding that takes it releases the GIL first).
// During finalization it leaks the state instead (taking the GIL then would
// end the thread). A thread that already has a state when the function
// first runs on it (a Python thread calling ImagePipeline.apply) keeps none:
// Python deletes that state when the thread ends, before this destructor.
class ThreadStateKeeper {
 public:
  void attach() {
    if (decided_) return;
    decided_ = true;
    if (PyGILState_GetThisThreadState() != nullptr) return;  // Python owns this thread's state.
    state_ = PyGILState_Ensure();                            // Creates the thread state, takes the GIL.
    thread_state_ = PyEval_SaveThread();
    attached_ = true;
  }

  ~ThreadStateKeeper() {
    if (!attached_ || !Py_IsInitialized() || finalizing()) return;
    PyEval_RestoreThread(thread_state_);
    PyGILState_Release(state_);  // The last release: deletes the state, drops the GIL.
  }

 private:
  static bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing() != 0;
#else
    return _Py_IsFinalizing() != 0;
#endif
  }

  bool decided_ = false;
  bool attached_ = false;
  PyGILState_STATE state_{};
  PyThreadState* thread_state_ = nullptr;
};

}  // namespace

ImageCallback python_image_callback(nb::object function, std::string name) {
  return [function = held(std::move(function)), name = std::move(name)](SampleImage& sample) {
    Image& image = sample.image;
    thread_local ThreadStateKeeper keeper;
    keeper.attach();
    nb::gil_scoped_acquire gil;
    // The array owns the pixels (moved, not copied) while Python holds it.
    auto* pixels = new Pixels(std::move(image.pixels));
    nb::capsule owner(pixels, [](void* p) noexcept { delete static_cast<Pixels*>(p); });
    const size_t shape[3] = {static_cast<size_t>(image.height), static_cast<size_t>(image.width),
                             static_cast<size_t>(image.channels)};
    nb::object array = nb::cast(nb::ndarray<nb::numpy, uint8_t>(pixels->data(), 3, shape, owner));
    owner.reset();
    // Only this reference left: nobody else can see the pixels any more.
    const auto alone = [&] { return Py_REFCNT(array.ptr()) == 1; };

    nb::object result;
    try {
      result = (*function)(array);
    } catch (nb::python_error& e) {
      if (alone()) image.pixels = std::move(*pixels);  // Keep the buffer for the next sample.
      auto raised = std::make_shared<PythonExceptionAttachment>(nb::borrow(e.value()));
      throw Error(ErrorKind::kInternal, name + " raised " + describe_exception(e.value()), {}, std::move(raised));
    }
    if (result.is(array)) {
      result.reset();
      if (alone()) {
        image.pixels = std::move(*pixels);  // Unchanged size, no copy.
      } else {
        image.pixels.assign(pixels->begin(), pixels->end());  // The function kept the array.
      }
      return;
    }
    Result out;
    if (!nb::try_cast(result, out, /*convert=*/false)) {
      throw Error(ErrorKind::kInternal, name + " returned a " + std::string(Py_TYPE(result.ptr())->tp_name) +
                                            ", not a C-contiguous uint8 H x W x C array");
    }
    take_function_result(sample, out.data(), static_cast<int64_t>(out.shape(0)), static_cast<int64_t>(out.shape(1)),
                         static_cast<int64_t>(out.shape(2)), name);
    out = Result();
    result.reset();
    if (alone()) sample.spare = std::move(*pixels);  // Its capacity serves the next sample.
  };
}

}  // namespace conveyor::bindings
