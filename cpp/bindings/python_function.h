#pragma once

#include <nanobind/nanobind.h>

#include <string>

#include "conveyor/ops/transforms/registry.h"

namespace conveyor::bindings {

/// The ImageCallback of a T.Lambda step: calls `function(array)` with the
/// sample's image as a uint8 H x W x C numpy array and takes the C-contiguous
/// uint8 H' x W' x C array it returns (conveyor.transforms.Lambda wraps the
/// user's function so that it returns exactly that) as the new image.
///
/// Runs on the engine's cpu threads without the GIL, taking it only for the
/// call. The array passed in owns the pixels for as long as Python holds it:
/// when the function returns it (or a result that no longer refers to it),
/// the pixels come back without a copy; an array the function kept stays
/// valid (the image is then copied). A Python exception becomes
/// Error{kInternal, "<name> raised <Type>: <message>"} carrying the exception
/// (PythonExceptionAttachment), so that the error raised in the consumer
/// thread has it as __cause__ with its traceback; the loader names the sample.
///
/// Ownership: holds a reference to `function`, released with the GIL held
/// (leaked if the interpreter is gone). Create it with the GIL held.
ImageCallback python_image_callback(nanobind::object function, std::string name);

}  // namespace conveyor::bindings
