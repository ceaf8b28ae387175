#include "conveyor/io/tar_shards.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
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

std::string as_string(const Bytes& bytes) { return {reinterpret_cast<const char*>(bytes.data()), bytes.size()}; }

// "s<i><extension>". (Appended, not `"s" + std::to_string(i) + ...`: gcc 12
// warns falsely of an overflow in that expression at -O3.)
std::string member_name(int i, const char* extension) {
  std::string name = "s";
  name += std::to_string(i);
  name += extension;
  return name;
}

// Writes tar archives the way tar/Python's tarfile do, with knobs to produce
// GNU long names, pax headers and broken archives.
class TarWriter {
 public:
  // A ustar header of `type` for `name` (<= 100 bytes unless `prefix` is set).
  void header(const std::string& name, size_t size, char type = '0', const std::string& prefix = "",
              bool gnu_magic = false) {
    std::vector<char> h(512, 0);
    std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
    std::snprintf(h.data() + 100, 8, "%07o", 0644);
    std::snprintf(h.data() + 108, 8, "%07o", 0);
    std::snprintf(h.data() + 116, 8, "%07o", 0);
    std::snprintf(h.data() + 124, 12, "%011zo", size);
    std::snprintf(h.data() + 136, 12, "%011o", 0);
    h[156] = type;
    if (gnu_magic) {
      std::memcpy(h.data() + 257, "ustar  ", 8);
    } else {
      std::memcpy(h.data() + 257, "ustar", 6);
      std::memcpy(h.data() + 263, "00", 2);
      std::memcpy(h.data() + 345, prefix.data(), std::min<size_t>(prefix.size(), 155));
    }
    std::memset(h.data() + 148, ' ', 8);
    unsigned sum = 0;
    for (char c : h) sum += static_cast<unsigned char>(c);
    std::snprintf(h.data() + 148, 8, "%06o", sum);
    h[155] = ' ';
    data_.insert(data_.end(), h.begin(), h.end());
  }
  void content(const std::string& bytes) {
    data_.insert(data_.end(), bytes.begin(), bytes.end());
    data_.resize((data_.size() + 511) / 512 * 512, 0);
  }
  void file(const std::string& name, const std::string& bytes) {
    header(name, bytes.size());
    content(bytes);
  }
  void gnu_long_name_file(const std::string& name, const std::string& bytes) {
    header("././@LongLink", name.size() + 1, 'L', "", true);
    content(name + '\0');
    header(name.substr(0, 99), bytes.size(), '0', "", true);
    content(bytes);
  }
  void pax_file(const std::string& name, const std::string& bytes) {
    std::string record = " path=" + name + "\n";
    std::string length = std::to_string(record.size() + 2);
    if (std::to_string(record.size() + length.size()).size() != length.size())
      length = std::to_string(record.size() + length.size() + 1);
    record = std::to_string(record.size() + length.size()) + record;
    header("PaxHeaders/x", record.size(), 'x');
    content(record);
    header("truncated-name", bytes.size());
    content(bytes);
  }
  void end() { data_.resize(data_.size() + 1024, 0); }
  std::vector<char>& bytes() { return data_; }

  void save(const fs::path& path) const {
    std::ofstream out(path, std::ios::binary);
    out.write(data_.data(), static_cast<std::streamsize>(data_.size()));
  }

 private:
  std::vector<char> data_;
};

class TarShardsTest : public detail::TempDirTest {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Expects constructing a source over `shards` to throw Error{kind} with what() == message.
  static void expect_error(const std::vector<std::string>& shards, ErrorKind kind, const std::string& message) {
    try {
      TarShardSource source(shards);
      FAIL() << "expected an error: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
};

TEST_F(TarShardsTest, GroupsMembersIntoSamplesAcrossShards) {
  TarWriter a;
  a.file("train/s0.jpg", "JPEG-0");
  a.file("train/s0.cls", "3\n");
  a.file("train/s0.json", "{\"i\":0}");
  a.file("train/s1.PNG", "PNG-1");  // Field names are lower-cased.
  a.file("train/s1.cls", "7");
  a.header("train/", 0, '5');  // A directory: ignored.
  a.end();
  a.save(path("a.tar"));
  TarWriter b;
  b.file("s2.webp", "WEBP-2");    // No cls: label -1.
  b.file("__meta__", "ignored");  // webdataset's metadata files are skipped,
  b.file("README", "ignored");    // as are names without an extension.
  b.end();
  b.save(path("b.tar"));

  TarShardSource source({path("a.tar"), path("b.tar")});
  ASSERT_EQ(source.size(), 3);
  Record r0 = source.read(0);
  EXPECT_EQ(as_string(r0.data), "JPEG-0");
  EXPECT_EQ(r0.label, 3);
  EXPECT_EQ(r0.key, path("a.tar") + ":train/s0.jpg");
  EXPECT_EQ(source.fields(0), (std::vector<std::string>{"jpg", "cls", "json"}));
  EXPECT_EQ(as_string(source.field(0, "json")), "{\"i\":0}");
  Record r1 = source.read(1);
  EXPECT_EQ(as_string(r1.data), "PNG-1");
  EXPECT_EQ(r1.label, 7);
  EXPECT_EQ(r1.key, path("a.tar") + ":train/s1.PNG");
  Record r2 = source.read(2);
  EXPECT_EQ(as_string(r2.data), "WEBP-2");
  EXPECT_EQ(r2.label, -1);
  EXPECT_EQ(source.key(2), path("b.tar") + ":s2.webp");
  EXPECT_EQ(source.max_label(), 7);
  EXPECT_EQ(TarShardSource({path("b.tar")}).max_label(), -1);
  try {
    source.field(2, "json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path("b.tar") + ":s2.webp: the sample has no field 'json'");
  }
}

TEST_F(TarShardsTest, ManyFieldNamesAndASampleOfManyFieldsAreIndexed) {
  // Found by hostile probing: each field name was looked up in a list of all
  // names, and each field compared with its sample's others, so that an
  // index of 200 000 names (7 MB of JSON) took minutes to build; both are
  // hashed now. (This test checks what is indexed, not how fast.)
  constexpr int kFields = 20000;
  TarWriter distinct;
  for (int i = 0; i < kFields; ++i) {
    const std::string n = std::to_string(i);
    std::string name = "s";
    name.append(n).append(".x").append(n).append(".jpg");
    distinct.file(name, "J");
  }
  distinct.end();
  distinct.save(path("distinct.tar"));
  TarShardSource many_names({path("distinct.tar")});
  ASSERT_EQ(many_names.size(), kFields);
  EXPECT_EQ(many_names.fields(kFields - 1), std::vector<std::string>{"x19999.jpg"});
  TarWriter one;
  for (int i = 0; i < kFields; ++i) one.file(std::string("s.f").append(std::to_string(i)), "F");
  one.file("s.jpg", "J");
  one.file("s.f7", "again");
  one.end();
  one.save(path("one.tar"));
  expect_error({path("one.tar")}, ErrorKind::kRead, path("one.tar") + ":s.f7: duplicate field 'f7' in sample 's'");
}

TEST_F(TarShardsTest, PrefixEndsAtTheFirstDotOfTheFileName) {
  TarWriter t;
  t.file("dir.v2/a.b.seg.png", "SEG");  // Field "b.seg.png": an image by its last extension.
  t.file("dir.v2/a.txt", "text");
  t.file("dir.v2/c.jpeg", "C");
  t.end();
  t.save(path("t.tar"));
  TarShardSource source({path("t.tar")});
  ASSERT_EQ(source.size(), 2);
  EXPECT_EQ(source.fields(0), (std::vector<std::string>{"b.seg.png", "txt"}));
  EXPECT_EQ(as_string(source.read(0).data), "SEG");
  EXPECT_EQ(source.key(1), path("t.tar") + ":dir.v2/c.jpeg");
}

TEST_F(TarShardsTest, ReadsLongNamesFromUstarPrefixGnuAndPax) {
  const std::string dir(120, 'd');
  const std::string gnu_name = std::string(150, 'g') + "/sample.jpg";
  const std::string pax_name = std::string(130, 'p') + "/other.png";
  TarWriter t;
  t.header("x.jpg", 3, '0', dir);  // ustar prefix field: dir/x.jpg.
  t.content("USX");
  t.gnu_long_name_file(gnu_name, "GNU");
  t.gnu_long_name_file(std::string(150, 'g') + "/sample.cls", "5");
  t.pax_file(pax_name, "PAX");
  t.end();
  t.save(path("long.tar"));
  TarShardSource source({path("long.tar")});
  ASSERT_EQ(source.size(), 3);
  EXPECT_EQ(source.key(0), path("long.tar") + ":" + dir + "/x.jpg");
  EXPECT_EQ(as_string(source.read(0).data), "USX");
  EXPECT_EQ(source.key(1), path("long.tar") + ":" + gnu_name);
  EXPECT_EQ(as_string(source.read(1).data), "GNU");
  EXPECT_EQ(source.read(1).label, 5);
  EXPECT_EQ(source.key(2), path("long.tar") + ":" + pax_name);
  EXPECT_EQ(as_string(source.read(2).data), "PAX");
}

TEST_F(TarShardsTest, ArchiveWithoutEndMarkerIsAccepted) {
  TarWriter t;
  t.file("a.jpg", "A");
  t.save(path("noend.tar"));
  TarShardSource source({path("noend.tar")});
  EXPECT_EQ(source.size(), 1);
}

TEST_F(TarShardsTest, TruncatedMemberNamesShardAndMember) {
  TarWriter t;
  t.file("a.jpg", "A");
  t.file("b.jpg", std::string(1000, 'B'));
  t.end();
  auto& bytes = t.bytes();
  bytes.resize(1024 + 512 + 700);  // Cut inside b.jpg's data.
  t.save(path("cut.tar"));
  expect_error({path("cut.tar")}, ErrorKind::kRead,
               path("cut.tar") +
                   ":b.jpg: truncated shard: the member needs 1000 bytes at offset 1536 but the file has 2236 bytes");
}

TEST_F(TarShardsTest, TruncatedHeaderIsAnError) {
  TarWriter t;
  t.file("a.jpg", "A");
  t.file("b.jpg", "B");
  t.bytes().resize(1024 + 100);
  t.save(path("cut.tar"));
  expect_error(
      {path("cut.tar")}, ErrorKind::kRead,
      path("cut.tar") + ": truncated shard: it ends inside a tar header at offset 1024 (after member 'a.jpg')");
}

TEST_F(TarShardsTest, CorruptHeaderIsAnError) {
  TarWriter t;
  t.file("a.jpg", "A");
  t.file("b.jpg", "B");
  t.end();
  t.bytes()[1024 + 3] ^= 0x55;  // Flip bits in b.jpg's name: checksum mismatch.
  t.save(path("bad.tar"));
  expect_error({path("bad.tar")}, ErrorKind::kRead,
               path("bad.tar") + ": corrupt tar header at offset 1024 (after member 'a.jpg'): checksum mismatch");

  std::ofstream(path("text.tar")) << std::string(2000, 'x');
  expect_error({path("text.tar")}, ErrorKind::kRead,
               path("text.tar") + ": corrupt tar header at offset 0 (first header): checksum mismatch");
}

TEST_F(TarShardsTest, BadSamplesAreErrors) {
  TarWriter dup;
  dup.file("a.jpg", "A");
  dup.file("a.jpg", "A again");
  dup.end();
  dup.save(path("dup.tar"));
  expect_error({path("dup.tar")}, ErrorKind::kRead, path("dup.tar") + ":a.jpg: duplicate field 'jpg' in sample 'a'");

  TarWriter cls;
  cls.file("a.jpg", "A");
  cls.file("a.cls", "dog");
  cls.end();
  cls.save(path("cls.tar"));
  expect_error({path("cls.tar")}, ErrorKind::kRead,
               path("cls.tar") + ":a.cls: malformed cls member: expected an integer, got 'dog'");

  TarWriter noimage;
  noimage.file("a.cls", "1");
  noimage.file("a.json", "{}");
  noimage.end();
  noimage.save(path("noimage.tar"));
  expect_error({path("noimage.tar")}, ErrorKind::kRead,
               path("noimage.tar") +
                   ":a: sample has no image member (jpg, jpeg, png, webp, tif, tiff, bmp, ppm or pgm); its members: "
                   "a.cls, a.json");
}

TEST_F(TarShardsTest, MissingEmptyAndSampleFreeShards) {
  expect_error({path("missing.tar")}, ErrorKind::kRead, path("missing.tar") + ": No such file or directory");
  std::ofstream(path("empty.tar")).close();
  expect_error({path("empty.tar")}, ErrorKind::kRead, path("empty.tar") + ": empty file, not a tar archive");
  TarWriter t;
  t.file("README", "no samples");
  t.end();
  t.save(path("none.tar"));
  expect_error({path("none.tar")}, ErrorKind::kConfig,
               "TarShards: the shards hold no samples (" + path("none.tar") + ")");
  expect_error({}, ErrorKind::kConfig, "TarShards: no shards given");
}

TEST_F(TarShardsTest, ConcurrentReadsSeeTheSameBytes) {
  TarWriter t;
  for (int i = 0; i < 64; ++i) {
    t.file(member_name(i, ".jpg"), std::string(static_cast<size_t>(100 + i * 37), static_cast<char>('a' + i % 26)));
    t.file(member_name(i, ".cls"), std::to_string(i));
  }
  t.end();
  t.save(path("many.tar"));
  const TarShardSource source({path("many.tar")});
  ASSERT_EQ(source.size(), 64);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 8; ++k) {
    threads.emplace_back([&, k] {
      for (int round = 0; round < 20; ++round) {
        for (int i = k; i < 64; i += 3) {
          Record r = source.read(i);
          const std::string expected(static_cast<size_t>(100 + i * 37), static_cast<char>('a' + i % 26));
          if (as_string(r.data) != expected || r.label != i) ++bad;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(TarShardsTest, RecordsOutliveTheSource) {
  TarWriter t;
  t.file("a.jpg", "kept alive");
  t.end();
  t.save(path("a.tar"));
  Record record;
  {
    TarShardSource source({path("a.tar")});
    record = source.read(0);
  }
  EXPECT_EQ(as_string(record.data), "kept alive");  // Records own their bytes.
}

// Regression: shards were memory-mapped, and a shard truncated after the source
// was opened (e.g. rewritten in place by `conveyor pack`) killed the process
// with SIGBUS on the next read. Reads now use pread and report the shrink.
TEST_F(TarShardsTest, ShardTruncatedAfterOpeningIsAReadErrorNamingTheMember) {
  TarWriter t;
  t.file("a.jpg", std::string(3000, 'A'));
  t.file("a.json", "{}");
  t.file("b.jpg", std::string(3000, 'B'));
  t.end();
  t.save(path("s.tar"));
  TarShardSource source({path("s.tar")});
  ASSERT_EQ(source.size(), 2);
  auto expect_shrunk = [&](auto read, const std::string& member, const std::string& cause) {
    try {
      read();
      ADD_FAILURE() << "expected a read error for " << member;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kRead);
      EXPECT_EQ(e.key(), path("s.tar") + ":" + member);
      EXPECT_EQ(e.cause(), cause);
    }
  };
  // Half the file: the first sample is still whole but the shard changed; the
  // second is cut.
  const auto indexed_size = fs::file_size(path("s.tar"));
  fs::resize_file(path("s.tar"), 4096);
  try {
    source.read(0);
    ADD_FAILURE() << "expected a read error for a.jpg";
  } catch (const Error& e) {
    EXPECT_EQ(e.key(), path("s.tar") + ":a.jpg");
    // The truncation may land in the same mtime tick as the write: "size" only, or also the mtime.
    EXPECT_TRUE(e.cause().starts_with("the shard changed since it was indexed (size 4096 bytes, was " +
                                      std::to_string(indexed_size)))
        << e.cause();
    EXPECT_TRUE(e.cause().ends_with("); recreate the TarShards source")) << e.cause();
  }
  expect_shrunk([&] { source.read(1); }, "b.jpg",
                "file shrank/truncated after it was opened: expected 3000 bytes at offset 5120, got 0");
  fs::resize_file(path("s.tar"), 2000);
  expect_shrunk([&] { source.read(0); }, "a.jpg",
                "file shrank/truncated after it was opened: expected 3000 bytes at offset 512, got 1488");
  fs::resize_file(path("s.tar"), 0);
  expect_shrunk([&] { source.read(0); }, "a.jpg",
                "file shrank/truncated after it was opened: expected 3000 bytes at offset 512, got 0");
  expect_shrunk([&] { source.field(0, "json"); }, "a.jpg",
                "file shrank/truncated after it was opened: expected 2 bytes at offset 4096, got 0");
}

// Regression: a shard is reopened by path on every read, and one replaced
// after indexing (renamed over, or rewritten in place with the same size) was
// read at the old offsets: the image bytes came from the new file, the label
// from the old index, silently.
TEST_F(TarShardsTest, ShardReplacedAfterIndexingIsAReadErrorNamingTheMember) {
  auto shard = [](char fill) {
    TarWriter t;
    t.file("a.jpg", std::string(100, fill));
    t.file("a.cls", "1");
    t.end();
    return t;
  };
  shard('A').save(path("s.tar"));
  TarShardSource source({path("s.tar")});
  ASSERT_EQ(as_string(source.read(0).data), std::string(100, 'A'));
  const auto indexed_mtime = fs::last_write_time(path("s.tar"));
  struct stat indexed {};
  ASSERT_EQ(::stat(path("s.tar").c_str(), &indexed), 0);
  auto expect_changed = [&](const std::string& change) {
    for (int i = 0; i < 2; ++i) {  // read() and field().
      try {
        i == 0 ? (void)source.read(0) : (void)source.field(0, "jpg");
        ADD_FAILURE() << "expected a read error (" << change << ")";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kRead);
        EXPECT_EQ(std::string(e.what()), path("s.tar") + ":a.jpg: the shard changed since it was indexed (" + change +
                                             "); recreate the TarShards source");
      }
    }
  };

  // Rewritten in place, same size, other bytes, a later mtime.
  shard('B').save(path("s.tar"));
  fs::last_write_time(path("s.tar"), indexed_mtime + std::chrono::hours(1));
  expect_changed("modification time changed");

  // Renamed over by another file of the same size and mtime.
  shard('C').save(path("new.tar"));
  fs::last_write_time(path("new.tar"), indexed_mtime);
  struct stat info {};
  ASSERT_EQ(::stat(path("new.tar").c_str(), &info), 0);
  fs::rename(path("new.tar"), path("s.tar"));
  expect_changed("another file: inode " + std::to_string(info.st_ino) + ", was " + std::to_string(indexed.st_ino));
}

// Reads hold no descriptor: any number of shards fits the descriptor limit,
// and a shard deleted since indexing is a read error naming the member.
TEST_F(TarShardsTest, HoldsNoDescriptorAndNamesTheMemberOfADeletedShard) {
  auto open_descriptors = [] {
    return std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator{});
  };
  if (!fs::exists("/proc/self/fd")) GTEST_SKIP() << "no /proc/self/fd";
  std::vector<std::string> shards;
  for (int i = 0; i < 40; ++i) {
    TarWriter t;
    t.file(member_name(i, ".jpg"), "X");
    t.end();
    t.save(path(std::to_string(i) + ".tar"));
    shards.push_back(path(std::to_string(i) + ".tar"));
  }
  const auto before = open_descriptors();
  TarShardSource source(shards);
  for (int64_t i = 0; i < source.size(); ++i) EXPECT_EQ(as_string(source.read(i).data), "X");
  EXPECT_EQ(open_descriptors(), before);
  fs::remove(shards[3]);
  try {
    source.read(3);
    ADD_FAILURE() << "expected a read error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_EQ(std::string(e.what()), shards[3] + ":s3.jpg: No such file or directory");
  }
}

// Regression: opening a FIFO blocked forever (waiting for a writer).
TEST_F(TarShardsTest, FifoIsRefusedByName) {
  ASSERT_EQ(::mkfifo(path("fifo.tar").c_str(), 0600), 0);
  expect_error({path("fifo.tar")}, ErrorKind::kRead, path("fifo.tar") + ": not a regular file (a FIFO)");
}

// Regression: the C string ended at the NUL, so "a.tar\0x" opened "a.tar".
TEST_F(TarShardsTest, PathWithANulByteIsAConfigErrorNamingIt) {
  TarWriter t;
  t.file("s0.jpg", "J");
  t.end();
  t.save(path("a.tar"));
  const std::string bad = path("a.tar") + std::string("\0x", 2);
  expect_error({path("a.tar"), bad}, ErrorKind::kConfig,
               "TarShards: shards[1] contains a NUL byte at position " + std::to_string(path("a.tar").size()) + " ('" +
                   path("a.tar") + "\\x00x'); file names cannot hold one");
}

// Bad input never crashes: every truncation and single-byte corruption of a
// small shard either indexes or throws conveyor::Error (run under ASan too).
TEST_F(TarShardsTest, TruncationsAndCorruptionsNeverCrash) {
  TarWriter t;
  t.file("a.jpg", "AAAA");
  t.file("a.cls", "12");
  t.gnu_long_name_file(std::string(120, 'n') + ".png", "PNG");
  t.pax_file(std::string(110, 'q') + "/z.webp", "WEBP");
  t.end();
  const std::vector<char> original = t.bytes();
  TarWriter variant;
  for (size_t cut = 1; cut < original.size(); cut += 37) {
    variant.bytes().assign(original.begin(), original.begin() + static_cast<std::ptrdiff_t>(cut));
    variant.save(path("v.tar"));
    try {
      TarShardSource source({path("v.tar")});
      for (int64_t i = 0; i < source.size(); ++i) source.read(i);
    } catch (const Error&) {
    }
  }
  for (size_t at = 0; at < original.size(); at += 7) {
    variant.bytes() = original;
    variant.bytes()[at] = static_cast<char>(variant.bytes()[at] ^ 0xA5);
    variant.save(path("v.tar"));
    try {
      TarShardSource source({path("v.tar")});
      for (int64_t i = 0; i < source.size(); ++i) source.read(i);
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace conveyor
