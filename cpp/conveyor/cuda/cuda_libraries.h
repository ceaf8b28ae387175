#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace conveyor {

/// The CUDA driver, nvJPEG and NVRTC, loaded at run time (dlopen) so that
/// conveyor builds and runs without CUDA and needs it only to decode on a
/// GPU. Declares the few functions conveyor calls, with the types of their
/// C headers reduced to what crosses the call (opaque handles as void*).
namespace cuda {

using Result = int;  // CUresult, nvjpegStatus_t, nvrtcResult: 0 is success.
using DevicePointer = unsigned long long;
using Stream = void*;

/// nvjpegImage_t.
struct JpegImage {
  unsigned char* channel[4];
  size_t pitch[4];
};

// nvjpeg.h's values that conveyor uses.
inline constexpr int kJpegBackendDefault = 0;
inline constexpr int kJpegBackendGpuHybrid = 2;
inline constexpr int kJpegBackendHardware = 3;
inline constexpr int kJpegOutputRgbInterleaved = 5;
// cuda.h's CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR/MINOR.
inline constexpr int kAttributeComputeMajor = 75;
inline constexpr int kAttributeComputeMinor = 76;

/// The functions, resolved once per process.
struct Libraries {
  // The driver (libcuda.so.1).
  Result (*cuInit)(unsigned int);
  Result (*cuDeviceGet)(int*, int);
  Result (*cuDeviceGetAttribute)(int*, int, int);
  Result (*cuDevicePrimaryCtxRetain)(void**, int);
  Result (*cuDevicePrimaryCtxRelease)(int);
  Result (*cuCtxPushCurrent)(void*);
  Result (*cuCtxPopCurrent)(void**);
  Result (*cuMemAlloc)(DevicePointer*, size_t);
  Result (*cuMemFree)(DevicePointer);
  Result (*cuMemcpyHtoDAsync)(DevicePointer, const void*, size_t, Stream);
  Result (*cuStreamSynchronize)(Stream);
  Result (*cuModuleLoadData)(void**, const void*);
  Result (*cuModuleUnload)(void*);
  Result (*cuModuleGetFunction)(void**, void*, const char*);
  Result (*cuLaunchKernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, Stream, void**,
                           void**);
  Result (*cuGetErrorName)(Result, const char**);
  // nvJPEG (libnvjpeg.so).
  Result (*nvjpegCreateEx)(int, void*, void*, unsigned int, void**);
  Result (*nvjpegDestroy)(void*);
  Result (*nvjpegJpegStateCreate)(void*, void**);
  Result (*nvjpegJpegStateDestroy)(void*);
  Result (*nvjpegDecodeBatchedInitialize)(void*, void*, int, int, int);
  Result (*nvjpegDecodeBatched)(void*, void*, const unsigned char* const*, const size_t*, JpegImage*, Stream);
  Result (*nvjpegGetHardwareDecoderInfo)(void*, unsigned int*, unsigned int*);  // Null before nvJPEG 11.4.
  // NVRTC (libnvrtc.so).
  Result (*nvrtcCreateProgram)(void**, const char*, const char*, int, const char* const*, const char* const*);
  Result (*nvrtcCompileProgram)(void*, int, const char* const*);
  Result (*nvrtcGetProgramLogSize)(void*, size_t*);
  Result (*nvrtcGetProgramLog)(void*, char*);
  Result (*nvrtcGetCUBINSize)(void*, size_t*);
  Result (*nvrtcGetCUBIN)(void*, char*);
  Result (*nvrtcDestroyProgram)(void**);
  const char* (*nvrtcGetErrorString)(Result);

  std::string jpeg_library;  ///< The file names loaded, for stats and errors.
  std::string nvrtc_library;
};

/// The library names tried, in order: the driver, nvJPEG, NVRTC (sonames of
/// CUDA 13, 12 and 11, then $CUDA_HOME/lib64 and /usr/local/cuda/lib64).
std::vector<std::vector<std::string>> library_candidates();

/// The CUDA major version a library's file name says it belongs to (the
/// number after ".so.": 13 for "libnvjpeg.so.13", 11 for
/// "libnvrtc.so.11.2"), or 0 when it says none ("libnvjpeg.so"). A library
/// of a newer CUDA than the driver's is not loaded: it would need that driver.
int library_cuda_major(const std::string& name);

/// The libraries, loaded at the first call (thread-safe). Throws
/// Error{kConfig} naming each library that could not be loaded (the names
/// tried and the loader's reason), or a function missing from one.
const Libraries& libraries();

/// As libraries(), from the given candidate names (tests: names that do
/// not exist). Not cached.
Libraries load_libraries(const std::vector<std::vector<std::string>>& candidates);

/// Throws Error{kInternal} "`what`: <the driver's error name>" unless `result` is 0.
void check_driver(Result result, const char* what);
/// Throws Error{kInternal} "`what`: nvJPEG status <name>" unless `result` is 0.
void check_jpeg(Result result, const char* what);

}  // namespace cuda
}  // namespace conveyor
