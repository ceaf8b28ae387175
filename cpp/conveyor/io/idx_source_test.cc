#include "conveyor/io/idx_source.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/io/testing/temp_dir.h"

// GCC 12 reports a false -Wrestrict on "literal" + std::string (GCC bug 105329).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

namespace conveyor {
namespace {

namespace fs = std::filesystem;

// An IDX file: magic 00 00 08 <ndims>, big-endian dims, then the bytes.
std::vector<uint8_t> idx(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out{0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

// Pixel value of (sample, y, x) in the generated image files.
uint8_t pixel(int sample, int y, int x) { return static_cast<uint8_t>(sample * 31 + y * 7 + x * 3); }

std::vector<uint8_t> images_payload(int n, int h, int w) {
  std::vector<uint8_t> out;
  for (int s = 0; s < n; ++s) {
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) out.push_back(pixel(s, y, x));
    }
  }
  return out;
}

std::vector<uint8_t> labels_payload(int n) {
  std::vector<uint8_t> out;
  for (int s = 0; s < n; ++s) out.push_back(static_cast<uint8_t>((s * 3) % 10));
  return out;
}

class IdxSourceTest : public detail::TempDirTest {
 protected:
  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  std::string write_gz(const std::string& name, const std::vector<uint8_t>& bytes) const {
    const std::string path = (dir_ / name).string();
    gzFile file = gzopen(path.c_str(), "wb");
    gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(file);
    return path;
  }
  std::string images(int n = 5, int h = 4, int w = 3) const {
    return write("images", idx({static_cast<uint32_t>(n), static_cast<uint32_t>(h), static_cast<uint32_t>(w)},
                               images_payload(n, h, w)));
  }
  std::string labels(int n = 5) const { return write("labels", idx({static_cast<uint32_t>(n)}, labels_payload(n))); }

  static void expect_error(const std::string& images, const std::string& labels, ErrorKind kind,
                           const std::string& message) {
    try {
      IdxSource source(images, labels);
      FAIL() << "expected: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind);
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
};

TEST_F(IdxSourceTest, ReadsRawSamplesAndLabels) {
  IdxSource source(images(), labels());
  ASSERT_EQ(source.size(), 5);
  EXPECT_EQ(source.sample_shape(), (std::vector<int64_t>{4, 3}));
  for (int s = 0; s < 5; ++s) {
    Record r = source.read(s);
    ASSERT_EQ(r.data.size(), 12u);
    for (int y = 0; y < 4; ++y) {
      for (int x = 0; x < 3; ++x) EXPECT_EQ(r.data.data()[y * 3 + x], pixel(s, y, x));
    }
    EXPECT_EQ(r.label, (s * 3) % 10);
    EXPECT_EQ(r.key, (dir_ / "images").string() + "[" + std::to_string(s) + "]");
  }
  EXPECT_EQ(source.max_label(), 9);  // Labels (s * 3) % 10 of s = 0..4: 0, 3, 6, 9, 2.
}

TEST_F(IdxSourceTest, ReadsGzipFiles) {
  const auto image_bytes = idx({5, 4, 3}, images_payload(5, 4, 3));
  IdxSource source(write_gz("images.gz", image_bytes), write_gz("labels.gz", idx({5}, labels_payload(5))));
  ASSERT_EQ(source.size(), 5);
  EXPECT_EQ(source.read(4).data.data()[11], pixel(4, 3, 2));
  EXPECT_EQ(source.read(4).label, 2);

  // A gzip "bomb" (header: 1 sample of 4x3, then 100 MB of zeros) is read
  // only one byte past what its header announces: "too long", not out of memory.
  std::vector<uint8_t> bomb = idx({1, 4, 3}, std::vector<uint8_t>(100u << 20, 0));
  const std::string bomb_path = write_gz("bomb.gz", bomb);
  bomb.clear();
  try {
    IdxSource bad(bomb_path, write("one", idx({1}, {0})));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              bomb_path + ": too long IDX file: the header says 1x4x3 (12 bytes of data), the file has more");
  }

  // A truncated gzip stream is a read error naming the file.
  const std::string whole = write_gz("whole.gz", image_bytes);
  std::ifstream in(whole, std::ios::binary);
  std::vector<uint8_t> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  gz.resize(gz.size() / 2);
  const std::string cut = write("cut.gz", gz);
  try {
    IdxSource bad(cut, labels());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_EQ(e.key(), cut);
    EXPECT_NE(std::string(e.cause()).find("gzip decompression failed"), std::string::npos) << e.what();
  }
}

TEST_F(IdxSourceTest, ValidatesHeadersAndSizes) {
  const std::string good_labels = labels();
  const std::string missing = (dir_ / "missing").string();
  expect_error(missing, good_labels, ErrorKind::kRead, missing + ": No such file or directory");
  const std::string magic = write("magic", {1, 2, 3, 4, 5, 6, 7, 8});
  expect_error(magic, good_labels, ErrorKind::kRead, magic + ": not an IDX file (bad magic number)");
  const std::string floats = write("floats", {0, 0, 0x0D, 1, 0, 0, 0, 0});
  expect_error(floats, good_labels, ErrorKind::kRead,
               floats + ": unsupported IDX element type 0x0d (only unsigned byte, 0x08)");
  const std::string flat = write("flat", idx({5}, labels_payload(5)));
  expect_error(flat, good_labels, ErrorKind::kRead,
               flat + ": an IDX image file needs 3 to 4 dimensions, this one has 1");
  auto payload = images_payload(5, 4, 3);
  payload.pop_back();
  const std::string short_file = write("short", idx({5, 4, 3}, payload));
  expect_error(short_file, good_labels, ErrorKind::kRead,
               short_file + ": truncated IDX file: the header says 5x4x3, the file has 59 bytes of data");
  payload.push_back(1);
  payload.push_back(2);
  const std::string long_file = write("long", idx({5, 4, 3}, payload));
  expect_error(long_file, good_labels, ErrorKind::kRead,
               long_file + ": too long IDX file: the header says 5x4x3 (60 bytes of data), the file has more");
  const std::string huge = write("huge", idx({0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, {}));
  expect_error(
      huge, good_labels, ErrorKind::kRead,
      huge + ": truncated IDX file: the header says 4294967295x4294967295x4294967295, the file has 0 bytes of data");
  const std::string header = write("header", {0, 0, 8, 3, 0, 0});
  expect_error(header, good_labels, ErrorKind::kRead, header + ": truncated IDX header");
  const std::string six = labels(6);
  expect_error(
      images(), six, ErrorKind::kConfig,
      "IDX files disagree on the number of samples: " + (dir_ / "images").string() + " has 5, " + six + " has 6");
}

// Regression: plain IDX files were memory-mapped, and one truncated after the
// source was opened killed the process with SIGBUS on the next read.
TEST_F(IdxSourceTest, FileTruncatedAfterOpeningIsAReadErrorNamingTheSample) {
  const std::string image_path = images(5, 4, 3);  // 16-byte header, 12 bytes per sample.
  IdxSource source(image_path, labels(5));
  fs::resize_file(image_path, 16 + 12 * 2 + 5);
  EXPECT_EQ(source.read(1).data.size(), 12u);
  try {
    source.read(2);
    ADD_FAILURE() << "expected a read error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_EQ(std::string(e.what()), image_path +
                                         "[2]: file shrank/truncated after it was opened: expected 12 bytes at "
                                         "offset 40, got 5");
  }
  fs::resize_file(image_path, 0);
  try {
    source.read(0);
    ADD_FAILURE() << "expected a read error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), image_path +
                                         "[0]: file shrank/truncated after it was opened: expected 12 bytes at "
                                         "offset 16, got 0");
  }
}

// Regression: opening a FIFO blocked forever; plain and ".gz" names alike.
TEST_F(IdxSourceTest, FifoIsRefusedByName) {
  for (const std::string name : {"fifo", "fifo.gz"}) {
    const std::string fifo = (dir_ / name).string();
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    expect_error(fifo, labels(), ErrorKind::kRead, fifo + ": not a regular file (a FIFO)");
    expect_error(images(), fifo, ErrorKind::kRead, fifo + ": not a regular file (a FIFO)");
  }
}

TEST_F(IdxSourceTest, HwcSamples) {
  std::vector<uint8_t> payload(2 * 2 * 2 * 3);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i);
  IdxSource source(write("rgb", idx({2, 2, 2, 3}, payload)), write("l", idx({2}, {0, 1})));
  EXPECT_EQ(source.sample_shape(), (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(source.read(1).data.data()[0], 12);
}

}  // namespace
}  // namespace conveyor
