#include "conveyor/io/idx_source.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "conveyor/core/error.h"
#include "conveyor/io/regular_file.h"

namespace conveyor {

namespace {

constexpr uint8_t kUnsignedByte = 0x08;

bool ends_with_gz(const std::string& path) { return path.size() >= 3 && path.ends_with(".gz"); }

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The decompressed content of a gzip IDX file, up to one byte more than its
// header announces: enough for parse_idx to tell "too long", while a
// decompression bomb can't exhaust memory. Closes the gzFile on every path.
Bytes read_gzip(const RegularFile& compressed) {
  const std::string& path = compressed.path();
  // gzdopen on a copy of the descriptor: the file was opened (and checked to
  // be a regular file) by RegularFile; gzclose closes the copy.
  const int fd = ::dup(compressed.descriptor());
  gzFile file = fd < 0 ? nullptr : gzdopen(fd, "rb");
  if (file == nullptr) {
    const int error = errno != 0 ? errno : ENOMEM;
    if (fd >= 0) ::close(fd);
    throw Error(ErrorKind::kRead, std::strerror(error), path);
  }
  struct Closer {
    gzFile f;
    ~Closer() { gzclose(f); }
  } closer{file};
  gzbuffer(file, 1 << 16);
  auto fail = [&] {
    int code = 0;
    const char* message = gzerror(file, &code);
    throw Error(ErrorKind::kRead,
                std::string("gzip decompression failed: ") +
                    (code == Z_ERRNO ? std::strerror(errno) : (message != nullptr ? message : "unknown error")),
                path);
  };
  std::vector<uint8_t> data;
  // Reads up to `limit` bytes in total; false at the end of the stream.
  auto read_up_to = [&](size_t limit) {
    constexpr size_t kChunk = 1 << 20;
    while (data.size() < limit) {
      const size_t done = data.size();
      const size_t want = std::min(kChunk, limit - done);
      data.resize(done + want);
      const int n = gzread(file, data.data() + done, static_cast<unsigned>(want));
      if (n < 0) fail();
      data.resize(done + static_cast<size_t>(n));
      if (n == 0) return false;
    }
    return true;
  };
  // Payloads over 1 TiB are not IDX files anyone has; parse_idx rejects them.
  constexpr uint64_t kMaxPayload = uint64_t{1} << 40;
  size_t limit = SIZE_MAX;
  if (read_up_to(4) && read_up_to(4 + 4 * size_t{data[3]})) {
    uint64_t payload = 1;
    for (size_t i = 0; i < data[3] && payload <= kMaxPayload; ++i) {
      const uint32_t dim = big_endian_u32(&data[4 + 4 * i]);
      payload = (dim != 0 && payload > kMaxPayload / dim) ? kMaxPayload + 1 : payload * dim;
    }
    limit = data.size() + static_cast<size_t>(std::min(payload, kMaxPayload)) + 1;
  }
  read_up_to(limit);
  // zlib reports a stream that stops before its end as EOF without an error
  // from gzread; gzerror tells.
  int code = 0;
  gzerror(file, &code);
  if (code != Z_OK && code != Z_STREAM_END) fail();
  return Bytes::from_vector(std::move(data));
}

// An IDX file: a gzip file is decompressed into `bytes`; a plain one stays on
// disk (`file`) and only its header is read here.
struct IdxFile {
  std::shared_ptr<const RegularFile> file;  // Plain files.
  Bytes bytes;                              // Gzip files: the whole content.
  std::vector<int64_t> dims;
  size_t header = 0;
  uint64_t payload = 0;  // Bytes after the header: the product of dims.
};

// Opens the file and checks the header: magic 00 00 08 <ndims>, then ndims
// big-endian u32 dimensions; the payload must be exactly the product of the
// dimensions.
IdxFile parse_idx(const std::string& path, int min_dims, int max_dims, const char* what) {
  constexpr size_t kMaxHeader = 4 + 4 * 255;
  IdxFile file;
  file.file = std::make_shared<const RegularFile>(path);
  std::vector<uint8_t> head;
  uint64_t size = 0;
  if (ends_with_gz(path)) {
    file.bytes = read_gzip(*file.file);
    file.file.reset();
    size = file.bytes.size();
    head.assign(file.bytes.data(), file.bytes.data() + std::min<uint64_t>(size, kMaxHeader));
  } else {
    size = file.file->size();
    head.resize(static_cast<size_t>(std::min<uint64_t>(size, kMaxHeader)));
    file.file->read_exact(0, head, path);
  }
  const uint8_t* p = head.data();
  if (size < 4 || p[0] != 0 || p[1] != 0) {
    throw Error(ErrorKind::kRead, "not an IDX file (bad magic number)", path);
  }
  if (p[2] != kUnsignedByte) {
    char code[8];
    std::snprintf(code, sizeof code, "0x%02x", p[2]);
    throw Error(ErrorKind::kRead, std::string("unsupported IDX element type ") + code + " (only unsigned byte, 0x08)",
                path);
  }
  const int ndims = p[3];
  if (ndims < min_dims || ndims > max_dims) {
    std::string expected = std::to_string(min_dims);
    if (max_dims != min_dims) expected.append(" to ").append(std::to_string(max_dims));
    throw Error(ErrorKind::kRead,
                std::string("an IDX ")
                    .append(what)
                    .append(" file needs ")
                    .append(expected)
                    .append(" dimensions, this one has ")
                    .append(std::to_string(ndims)),
                path);
  }
  file.header = 4 + 4 * static_cast<size_t>(ndims);
  if (size < file.header) throw Error(ErrorKind::kRead, "truncated IDX header", path);
  for (int i = 0; i < ndims; ++i) file.dims.push_back(big_endian_u32(p + 4 + 4 * i));
  const uint64_t payload = size - file.header;
  // The running product is compared before each multiplication (product * d >
  // payload <=> product > payload / d), so it never exceeds the payload and
  // never overflows: with files over 4 GiB a multiplication could otherwise
  // wrap around to exactly the payload and accept a header whose true size is
  // far larger (found by reasoning about idx_fuzzer; test in idx_source_overflow_test.cc).
  uint64_t product = 1;
  bool too_big = false;
  for (int64_t d : file.dims) {
    const auto dim = static_cast<uint64_t>(d);
    if (dim != 0 && product > payload / dim) {
      too_big = true;
      break;
    }
    product *= dim;
  }
  if (too_big || product != payload) {
    std::string shape;
    for (int64_t d : file.dims) {
      if (!shape.empty()) shape.push_back('x');
      shape.append(std::to_string(d));
    }
    if (too_big) {
      throw Error(ErrorKind::kRead,
                  "truncated IDX file: the header says " + shape + ", the file has " + std::to_string(payload) +
                      " bytes of data",
                  path);
    }
    // (A gzip file is decompressed only one byte past the header's size, so
    // the excess is not counted.)
    throw Error(ErrorKind::kRead,
                "too long IDX file: the header says " + shape + " (" + std::to_string(product) +
                    " bytes of data), the file has more",
                path);
  }
  file.payload = payload;
  return file;
}

}  // namespace

struct IdxSource::Data {
  std::string images_path;
  // Plain files are read per sample with pread: a file truncated after it was
  // opened gives Error{kRead} naming the sample, not the SIGBUS of a mapping.
  // The descriptor is held for the source's lifetime (never reopened by
  // path), so a file renamed over the path is not read: every sample comes
  // from the file that was validated. (Tar shards, reopened per read, check
  // the shard's identity instead.)
  std::shared_ptr<const RegularFile> file;
  std::shared_ptr<const Bytes> images;  // Gzip files: the decompressed bytes.
  size_t header = 0;
  size_t sample_bytes = 0;
  std::vector<int64_t> sample_shape;
  std::vector<int64_t> labels;
};

IdxSource::IdxSource(std::string images_path, std::string labels_path) {
  auto data = std::make_unique<Data>();
  IdxFile images = parse_idx(images_path, 3, 4, "image");
  IdxFile labels = parse_idx(labels_path, 1, 1, "label");
  const int64_t n = images.dims[0];
  check_config(n == labels.dims[0], "IDX files disagree on the number of samples: " + images_path + " has " +
                                        std::to_string(n) + ", " + labels_path + " has " +
                                        std::to_string(labels.dims[0]));
  data->images_path = std::move(images_path);
  data->sample_shape.assign(images.dims.begin() + 1, images.dims.end());
  data->sample_bytes = 1;
  for (int64_t d : data->sample_shape) data->sample_bytes *= static_cast<size_t>(d);
  data->file = std::move(images.file);
  data->images = std::make_shared<const Bytes>(std::move(images.bytes));
  data->header = images.header;
  if (labels.file) {
    const std::vector<uint8_t> bytes = labels.file->read_exact(labels.header, labels.payload, labels_path);
    data->labels.assign(bytes.begin(), bytes.end());
  } else {
    data->labels.assign(labels.bytes.data() + labels.header, labels.bytes.data() + labels.bytes.size());
  }
  data_ = std::move(data);
}

IdxSource::~IdxSource() = default;

int64_t IdxSource::size() const { return static_cast<int64_t>(data_->labels.size()); }

Record IdxSource::read(int64_t index) const {
  check_config(index >= 0 && index < size(),
               "sample index " + std::to_string(index) + " is out of range [0, " + std::to_string(size()) + ")");
  // Within the payload: parse_idx checked header + N * sample_bytes == size.
  const size_t offset = data_->header + static_cast<size_t>(index) * data_->sample_bytes;
  std::string sample = key(index);
  Bytes bytes = data_->file ? Bytes::from_vector(data_->file->read_exact(offset, data_->sample_bytes, sample))
                            : Bytes(data_->images, data_->images->data() + offset, data_->sample_bytes);
  return Record{std::move(bytes), data_->labels[static_cast<size_t>(index)], std::move(sample)};
}

std::string IdxSource::key(int64_t index) const { return data_->images_path + "[" + std::to_string(index) + "]"; }

const std::vector<int64_t>& IdxSource::sample_shape() const noexcept { return data_->sample_shape; }

std::optional<int64_t> IdxSource::max_label() const {
  const std::vector<int64_t>& labels = data_->labels;
  return labels.empty() ? -1 : *std::max_element(labels.begin(), labels.end());
}

}  // namespace conveyor
