#include "conveyor/io/regular_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/io/source.h"
#include "conveyor/io/testing/temp_dir.h"

namespace conveyor {
namespace {

namespace fs = std::filesystem;

class RegularFileTest : public detail::TempDirTest {
 protected:
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  // Expects both RegularFile and read_file to refuse `path` with `message`.
  static void expect_refused(const std::string& path, const std::string& message) {
    for (int reader = 0; reader < 2; ++reader) {
      try {
        if (reader == 0) {
          RegularFile file(path);
        } else {
          read_file(path);
        }
        ADD_FAILURE() << "expected: " << message;
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kRead);
        EXPECT_EQ(e.key(), path);
        EXPECT_EQ(std::string(e.what()), message);
      }
    }
  }
};

TEST_F(RegularFileTest, ReadsRangesAndReportsShortReads) {
  const std::string path = write("f", "0123456789");
  RegularFile file(path);
  EXPECT_EQ(file.size(), 10u);
  EXPECT_EQ(file.path(), path);
  const std::vector<uint8_t> bytes = file.read_exact(3, 4, "key");
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "3456");
  std::vector<uint8_t> out(8);
  EXPECT_EQ(file.read_at_most(6, out, "key"), 4u);
  fs::resize_file(path, 5);
  try {
    file.read_exact(3, 4, "f:member");
    ADD_FAILURE() << "expected a read error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_EQ(std::string(e.what()),
              "f:member: file shrank/truncated after it was opened: expected 4 bytes at offset 3, got 2");
  }
}

// Regression: read_file (FileList, ImageFolder, COCO json) opened a FIFO with a
// blocking open() and waited forever for a writer.
TEST_F(RegularFileTest, NonRegularFilesAreRefusedByName) {
  const std::string fifo = (dir_ / "fifo.jpg").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_refused(fifo, fifo + ": not a regular file (a FIFO)");
  if (fs::exists("/dev/null")) expect_refused("/dev/null", "/dev/null: not a regular file (a character device)");
  expect_refused(dir_.string(), dir_.string() + ": Is a directory");
  expect_refused((dir_ / "missing").string(), (dir_ / "missing").string() + ": No such file or directory");
}

// Regression: the C string ended at the NUL, so "c.png\0junk" opened "c.png".
TEST_F(RegularFileTest, PathsWithANulByteAreRefusedNamingThem) {
  const std::string good = write("c.png", "pixels");
  const std::string bad = good + std::string("\0junk\n", 6);
  const std::string shown = good + "\\x00junk\\x0a";
  const std::string message = "path contains a NUL byte at position " + std::to_string(good.size()) + " ('" + shown +
                              "'); file names " + "cannot hold one";
  for (int reader = 0; reader < 3; ++reader) {
    try {
      if (reader == 0) RegularFile file(bad);
      if (reader == 1) read_file(bad);
      if (reader == 2) FileSource({good, bad});
      ADD_FAILURE() << "expected: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_EQ(e.key(), "");
      EXPECT_EQ(e.cause(), reader == 2 ? "paths[1]" + message.substr(4) : message);
    }
  }
  EXPECT_NO_THROW(check_path(good, "path"));
  EXPECT_NO_THROW(check_path("caf\xc3\xa9 \xff.jpg", "path"));  // Any other byte is the file system's.
}

}  // namespace
}  // namespace conveyor
