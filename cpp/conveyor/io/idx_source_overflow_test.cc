// Regression test: IDX headers whose dimension product overflows 64 bits.
// Before the fix, parse_idx multiplied first and compared after, so a header
// of 2 x (2^32 - 1) x 2147483650 over a 12 GiB payload wrapped around to
// exactly the payload size: the file was accepted with 2^63-byte samples and
// the first read() faulted far outside the mapping (a segfault in the io
// thread, killing the process). The file is sparse: 16 header bytes and a
// hole, so the test needs no disk space.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/io/idx_source.h"

namespace conveyor {
namespace {

namespace fs = std::filesystem;

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

// Writes `header` then extends the file to `size` bytes with a hole. Returns
// false when the file system does not make it sparse (the test is skipped
// rather than writing gigabytes).
bool write_sparse(const std::string& path, const std::vector<uint8_t>& header, uint64_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = ::write(fd, header.data(), header.size()) == static_cast<ssize_t>(header.size()) &&
            ::ftruncate(fd, static_cast<off_t>(size)) == 0;
  struct stat info {};
  ok = ok && ::fstat(fd, &info) == 0 && static_cast<uint64_t>(info.st_blocks) * 512 < (uint64_t{1} << 24);
  ::close(fd);
  return ok;
}

TEST(IdxSourceOverflow, ProductWrappingToThePayloadIsRejected) {
  const fs::path dir = fs::temp_directory_path() / ("conveyor_idx_overflow_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string images = (dir / "images").string(), labels = (dir / "labels").string();

  // 2 * H * W = 2^64 + P: the wrapped product equals the payload P.
  constexpr uint32_t kN = 2, kH = 0xFFFFFFFFu, kW = 2147483650u;
  constexpr uint64_t kPayload = 12884901884u;
  static_assert(uint64_t{kN} * kH <= kPayload, "the product passes the first check");
  static_assert(uint64_t{kN} * kH * kW == kPayload, "and wraps around to the payload");
  std::vector<uint8_t> header{0, 0, 0x08, 3};
  for (uint32_t d : {kN, kH, kW}) put_u32(header, d);
  if (!write_sparse(images, header, header.size() + kPayload)) {
    fs::remove_all(dir);
    GTEST_SKIP() << "the temporary file system does not support sparse files";
  }
  std::vector<uint8_t> label_file{0, 0, 0x08, 1};
  put_u32(label_file, kN);
  label_file.push_back(1);
  label_file.push_back(2);
  ASSERT_TRUE(write_sparse(labels, label_file, label_file.size()));

  try {
    IdxSource source(images, labels);
    ADD_FAILURE() << "accepted a header of 2x4294967295x2147483650 over " << kPayload << " bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_EQ(e.key(), images);
    EXPECT_NE(e.cause().find("truncated IDX file"), std::string::npos) << e.cause();
  }
  fs::remove_all(dir);
}

TEST(IdxSourceOverflow, ZeroSamplesAndExactSizesStillPass) {
  const fs::path dir = fs::temp_directory_path() / ("conveyor_idx_exact_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string images = (dir / "images").string(), labels = (dir / "labels").string();
  std::vector<uint8_t> label_file{0, 0, 0x08, 1};
  put_u32(label_file, 0);
  ASSERT_TRUE(write_sparse(labels, label_file, label_file.size()));
  // 0 samples of 28x28: an empty payload is exact.
  std::vector<uint8_t> header{0, 0, 0x08, 3};
  for (uint32_t d : {0u, 28u, 28u}) put_u32(header, d);
  ASSERT_TRUE(write_sparse(images, header, header.size()));
  EXPECT_EQ(IdxSource(images, labels).size(), 0);
  // 0 samples of huge images: still an exact empty payload.
  std::vector<uint8_t> big{0, 0, 0x08, 3};
  for (uint32_t d : {0u, 0xFFFFFFFFu, 1u}) put_u32(big, d);
  ASSERT_TRUE(write_sparse(images, big, big.size()));
  EXPECT_EQ(IdxSource(images, labels).size(), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace conveyor
