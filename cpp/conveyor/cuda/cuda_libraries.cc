#include "conveyor/cuda/cuda_libraries.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

#include "conveyor/core/error.h"

namespace conveyor::cuda {

namespace {

// One library: the first candidate that loads and is not newer than the
// driver (`driver_major`, 0: any), or every candidate's reason.
void* open_first(const std::vector<std::string>& names, int driver_major, std::string& loaded, std::string& failures) {
  std::string reasons;
  for (const std::string& name : names) {
    if (driver_major > 0 && library_cuda_major(name) > driver_major) {
      reasons += "\n  " + name + ": needs a CUDA " + std::to_string(library_cuda_major(name)) +
                 " driver, this one is CUDA " + std::to_string(driver_major);
      continue;
    }
    // RTLD_LOCAL: these symbols serve only the pointers resolved here.
    if (void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      loaded = name;
      return handle;
    }
    const char* reason = dlerror();
    reasons += "\n  " + std::string(reason != nullptr ? reason : name + ": not loaded");
  }
  failures += reasons;
  return nullptr;
}

template <typename F>
void resolve(void* handle, const char* symbol, F& function, std::string& missing, bool required = true) {
  function = handle == nullptr ? nullptr : reinterpret_cast<F>(dlsym(handle, symbol));
  if (function == nullptr && handle != nullptr && required)
    missing += std::string(missing.empty() ? "" : ", ") + symbol;
}

std::string status_name(Result status) {
  static constexpr const char* kNames[] = {"SUCCESS",
                                           "NOT_INITIALIZED",
                                           "INVALID_PARAMETER",
                                           "BAD_JPEG",
                                           "JPEG_NOT_SUPPORTED",
                                           "ALLOCATOR_FAILURE",
                                           "EXECUTION_FAILED",
                                           "ARCH_MISMATCH",
                                           "INTERNAL_ERROR",
                                           "IMPLEMENTATION_NOT_SUPPORTED",
                                           "INCOMPLETE_BITSTREAM"};
  if (status >= 0 && status < static_cast<Result>(std::size(kNames))) return kNames[status];
  return std::to_string(status);
}

}  // namespace

int library_cuda_major(const std::string& name) {
  const size_t at = name.rfind(".so.");
  if (at == std::string::npos) return 0;
  int major = 0;
  for (size_t i = at + 4; i < name.size() && name[i] >= '0' && name[i] <= '9' && major < 1000; ++i) {
    major = major * 10 + (name[i] - '0');
  }
  return major;
}

std::vector<std::vector<std::string>> library_candidates() {
  std::vector<std::string> folders;
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && *home != '\0') {
    folders.push_back(std::string(home) + "/lib64/");
  }
  folders.emplace_back("/usr/local/cuda/lib64/");
  const auto named = [&](std::vector<std::string> sonames) {
    std::vector<std::string> all = sonames;
    for (const std::string& folder : folders)
      for (const std::string& soname : sonames) all.push_back(folder + soname);
    return all;
  };
  return {{"libcuda.so.1"},
          named({"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so.11"}),
          named({"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"})};
}

Libraries load_libraries(const std::vector<std::vector<std::string>>& candidates) {
  check_config(candidates.size() == 3, "load_libraries: three lists of candidates (driver, nvJPEG, NVRTC)");
  Libraries l{};
  std::string driver_name, failures;
  void* driver = open_first(candidates[0], 0, driver_name, failures);
  // The driver's CUDA version (13000 for 13.0) bounds the libraries'.
  int driver_version = 0;
  if (driver != nullptr) {
    using Version = Result (*)(int*);
    if (auto version = reinterpret_cast<Version>(dlsym(driver, "cuDriverGetVersion"))) version(&driver_version);
  }
  void* jpeg = open_first(candidates[1], driver_version / 1000, l.jpeg_library, failures);
  void* nvrtc = open_first(candidates[2], driver_version / 1000, l.nvrtc_library, failures);
  if (driver == nullptr || jpeg == nullptr || nvrtc == nullptr) {
    std::string which;
    if (driver == nullptr) which += "the CUDA driver (libcuda.so.1: is there an NVIDIA GPU and its driver?)";
    if (jpeg == nullptr) which += std::string(which.empty() ? "" : ", ") + "nvJPEG (CUDA's libnvjpeg)";
    if (nvrtc == nullptr) which += std::string(which.empty() ? "" : ", ") + "NVRTC (CUDA's libnvrtc)";
    for (void* handle : {driver, jpeg, nvrtc})
      if (handle != nullptr) dlclose(handle);
    throw Error(ErrorKind::kConfig,
                "decoding on the GPU needs the CUDA libraries, and " + which +
                    " could not be loaded (set CUDA_HOME to the CUDA toolkit's folder, or add its lib64 to "
                    "LD_LIBRARY_PATH); tried:" +
                    failures);
  }
  std::string missing;
  resolve(driver, "cuInit", l.cuInit, missing);
  resolve(driver, "cuDeviceGet", l.cuDeviceGet, missing);
  resolve(driver, "cuDeviceGetAttribute", l.cuDeviceGetAttribute, missing);
  resolve(driver, "cuDevicePrimaryCtxRetain", l.cuDevicePrimaryCtxRetain, missing);
  resolve(driver, "cuDevicePrimaryCtxRelease_v2", l.cuDevicePrimaryCtxRelease, missing);
  resolve(driver, "cuCtxPushCurrent_v2", l.cuCtxPushCurrent, missing);
  resolve(driver, "cuCtxPopCurrent_v2", l.cuCtxPopCurrent, missing);
  resolve(driver, "cuMemAlloc_v2", l.cuMemAlloc, missing);
  resolve(driver, "cuMemFree_v2", l.cuMemFree, missing);
  resolve(driver, "cuMemcpyHtoDAsync_v2", l.cuMemcpyHtoDAsync, missing);
  resolve(driver, "cuStreamSynchronize", l.cuStreamSynchronize, missing);
  resolve(driver, "cuModuleLoadData", l.cuModuleLoadData, missing);
  resolve(driver, "cuModuleUnload", l.cuModuleUnload, missing);
  resolve(driver, "cuModuleGetFunction", l.cuModuleGetFunction, missing);
  resolve(driver, "cuLaunchKernel", l.cuLaunchKernel, missing);
  resolve(driver, "cuGetErrorName", l.cuGetErrorName, missing);
  resolve(jpeg, "nvjpegCreateEx", l.nvjpegCreateEx, missing);
  resolve(jpeg, "nvjpegDestroy", l.nvjpegDestroy, missing);
  resolve(jpeg, "nvjpegJpegStateCreate", l.nvjpegJpegStateCreate, missing);
  resolve(jpeg, "nvjpegJpegStateDestroy", l.nvjpegJpegStateDestroy, missing);
  resolve(jpeg, "nvjpegDecodeBatchedInitialize", l.nvjpegDecodeBatchedInitialize, missing);
  resolve(jpeg, "nvjpegDecodeBatched", l.nvjpegDecodeBatched, missing);
  resolve(jpeg, "nvjpegGetHardwareDecoderInfo", l.nvjpegGetHardwareDecoderInfo, missing, false);
  resolve(nvrtc, "nvrtcCreateProgram", l.nvrtcCreateProgram, missing);
  resolve(nvrtc, "nvrtcCompileProgram", l.nvrtcCompileProgram, missing);
  resolve(nvrtc, "nvrtcGetProgramLogSize", l.nvrtcGetProgramLogSize, missing);
  resolve(nvrtc, "nvrtcGetProgramLog", l.nvrtcGetProgramLog, missing);
  resolve(nvrtc, "nvrtcGetCUBINSize", l.nvrtcGetCUBINSize, missing);
  resolve(nvrtc, "nvrtcGetCUBIN", l.nvrtcGetCUBIN, missing);
  resolve(nvrtc, "nvrtcDestroyProgram", l.nvrtcDestroyProgram, missing);
  resolve(nvrtc, "nvrtcGetErrorString", l.nvrtcGetErrorString, missing);
  check_config(missing.empty(), "decoding on the GPU: the CUDA libraries loaded (" + driver_name + ", " +
                                    l.jpeg_library + ", " + l.nvrtc_library + ") lack " + missing +
                                    ": CUDA 11.2 or later is needed");
  return l;  // The handles stay open for the process's life: the pointers point into them.
}

const Libraries& libraries() {
  static std::once_flag once;
  static Libraries loaded;
  static std::string failure;
  std::call_once(once, [] {
    try {
      loaded = load_libraries(library_candidates());
    } catch (const Error& e) {
      failure = e.cause();
    }
  });
  if (!failure.empty()) throw Error(ErrorKind::kConfig, failure);
  return loaded;
}

void check_driver(Result result, const char* what) {
  if (result == 0) return;
  const char* name = nullptr;
  const Libraries& l = libraries();
  if (l.cuGetErrorName != nullptr) l.cuGetErrorName(result, &name);
  throw Error(ErrorKind::kInternal,
              std::string(what) + ": CUDA error " + (name != nullptr ? name : std::to_string(result)));
}

void check_jpeg(Result result, const char* what) {
  if (result != 0) throw Error(ErrorKind::kInternal, std::string(what) + ": nvJPEG status " + status_name(result));
}

}  // namespace conveyor::cuda
