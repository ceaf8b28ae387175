#include "conveyor/cuda/cuda_libraries.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "conveyor/core/error.h"
#include "conveyor/cuda/device_image_decoder.h"

namespace conveyor {
namespace {

std::string config_error(const std::vector<std::vector<std::string>>& candidates) {
  try {
    cuda::load_libraries(candidates);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.cause();
  }
  ADD_FAILURE() << "loaded";
  return "";
}

TEST(CudaLibrariesTest, LibrariesThatCannotBeLoadedAreNamedWithEveryNameTried) {
  const std::string message =
      config_error({{"libcuda-absent.so.1"}, {"libnvjpeg-absent.so.13", "/nowhere/libnvjpeg.so"}, {"libz.so.1"}});
  EXPECT_NE(message.find("decoding on the GPU needs the CUDA libraries, and the CUDA driver (libcuda.so.1: is there "
                         "an NVIDIA GPU and its driver?), nvJPEG (CUDA's libnvjpeg) could not be loaded"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("NVRTC"), std::string::npos) << message;  // libz loads: it is not named.
  EXPECT_NE(message.find("libnvjpeg-absent.so.13"), std::string::npos) << message;
  EXPECT_NE(message.find("/nowhere/libnvjpeg.so"), std::string::npos) << message;
}

TEST(CudaLibrariesTest, ALibraryWithoutTheFunctionsIsNamed) {
  const std::string message = config_error({{"libz.so.1"}, {"libz.so.1"}, {"libz.so.1"}});
  EXPECT_NE(message.find("the CUDA libraries loaded (libz.so.1, libz.so.1, libz.so.1) lack cuInit, "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("CUDA 11.2 or later is needed"), std::string::npos) << message;
}

TEST(CudaLibrariesTest, TheCandidatesAreCudaSonamesThenTheToolkitFolders) {
  const auto candidates = cuda::library_candidates();
  ASSERT_EQ(candidates.size(), 3u);
  EXPECT_EQ(candidates[0].front(), "libcuda.so.1");
  EXPECT_EQ(candidates[1].front(), "libnvjpeg.so.13");
  EXPECT_EQ(candidates[2].front(), "libnvrtc.so.13");
  EXPECT_EQ(candidates[1].back(), "/usr/local/cuda/lib64/libnvjpeg.so.11");
}

TEST(CudaLibrariesTest, ALibrarysCudaVersionIsReadFromItsName) {
  // A library newer than the driver is skipped (it would need that driver).
  EXPECT_EQ(cuda::library_cuda_major("libnvjpeg.so.13"), 13);
  EXPECT_EQ(cuda::library_cuda_major("/usr/local/cuda/lib64/libnvrtc.so.11.2"), 11);
  EXPECT_EQ(cuda::library_cuda_major("libnvjpeg.so"), 0);
  EXPECT_EQ(cuda::library_cuda_major("libcuda.so.1"), 1);
}

TEST(CudaLibrariesTest, WithoutTheDriverTheDecoderIsAConfigError) {
  if (void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(driver);
    GTEST_SKIP() << "this machine has a CUDA driver (tests/test_cuda_device.py runs the decoder)";
  }
  auto pipeline =
      std::make_shared<ImagePipeline>(std::vector<TransformSpec>{CenterCropSpec{{8, 8}}}, ImageOutputSpec{});
  try {
    DeviceImageDecoder decoder(pipeline, 0);
    FAIL() << "made a decoder without a CUDA driver";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.cause().find("the CUDA driver (libcuda.so.1"), std::string::npos) << e.cause();
  }
}

}  // namespace
}  // namespace conveyor
