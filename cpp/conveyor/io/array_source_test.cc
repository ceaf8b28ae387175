#include "conveyor/io/array_source.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/io/testing/temp_dir.h"

namespace conveyor {
namespace {

std::vector<uint8_t> bytes_of(const Record& r) { return {r.data.data(), r.data.data() + r.data.size()}; }

TEST(ArraySourceTest, MemoryRecordsAreViewsWithLabels) {
  const std::vector<uint8_t> data{1, 2, 3, 4, 5, 6};
  const ArraySource source(nullptr, data, 2, {7, 8, 9}, "images");
  EXPECT_EQ(source.size(), 3);
  const Record r = source.read(1);
  EXPECT_EQ(r.data.data(), data.data() + 2);  // No copy.
  EXPECT_EQ(bytes_of(r), (std::vector<uint8_t>{3, 4}));
  EXPECT_EQ(r.label, 8);
  EXPECT_EQ(r.key, "images[1]");
  EXPECT_EQ(ArraySource(nullptr, data, 2, {}, "x").read(2).label, -1);
  EXPECT_EQ(source.max_label(), 9);  // What a mixture checks its label offsets against.
  EXPECT_EQ(ArraySource(nullptr, data, 2, {}, "x").max_label(), -1);
}

TEST(ArraySourceTest, BadArgumentsAreConfigErrors) {
  const std::vector<uint8_t> data(4);
  try {
    ArraySource(nullptr, data, 2, {1}, "x");
    FAIL() << "accepted 1 label for 2 samples";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "ArraySource: 1 labels for 2 samples");
  }
  EXPECT_THROW(ArraySource(nullptr, data, 0, {}, "x"), Error);
  try {
    ArraySource(nullptr, data, 3, {}, "x");
    FAIL() << "accepted 4 bytes as 3-byte samples";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "ArraySource: 4 bytes are not a whole number of 3-byte samples");
  }
  EXPECT_THROW(ArraySource::from_file("unused", 0, int64_t{1} << 40, int64_t{1} << 40, {}), Error);
}

class ArraySourceFileTest : public detail::TempDirTest {};

TEST_F(ArraySourceFileTest, ReadsEachSampleFromTheFile) {
  const std::string path = (dir_ / "a.bin").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << "HEADER" << std::string("abcdefgh");
  }
  const auto source = ArraySource::from_file(path, 6, 4, 2, {});
  EXPECT_EQ(bytes_of(source->read(3)), (std::vector<uint8_t>{'g', 'h'}));
  EXPECT_EQ(source->key(3), path + "[3]");
  // Truncated after opening: a read error naming the sample, not a crash.
  std::filesystem::resize_file(path, 9);
  try {
    source->read(2);
    FAIL() << "read past the end";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_EQ(e.key(), path + "[2]");
  }
}

TEST_F(ArraySourceFileTest, AShortFileIsAReadErrorNamingIt) {
  const std::string path = (dir_ / "short.bin").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << "abc";
  }
  try {
    ArraySource::from_file(path, 0, 2, 2, {});
    FAIL() << "accepted a short file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_EQ(e.key(), path);
    EXPECT_EQ(e.cause(), "file too short: 2 samples of 2 bytes from offset 0 need 4 bytes, the file has 3");
  }
}

}  // namespace
}  // namespace conveyor
