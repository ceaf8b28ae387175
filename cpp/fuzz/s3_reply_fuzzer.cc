// libFuzzer target: what the S3 client parses of a server's replies and of
// the user's AWS files: ListObjectsV2 pages (XML, with entities), S3 error
// bodies, AWS-style INI files and s3:// URLs.
//
// Input layout: byte 0 selects the parser (mod 4), the rest is its input.
//
// Contract checked: parse_s3_list_page() returns a page or throws
// conveyor::Error of kind kRead; s3_error_code() returns "" or a word of at
// most 64 letters, digits, '.', '_' or '-'; parse_aws_ini() returns; split_s3_url() returns a bucket
// with no '/' or throws conveyor::Error of kind kConfig. Any other exception,
// a crash or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "conveyor/core/error.h"
#include "conveyor/io/s3.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 4) {
    case 0:
      try {
        const conveyor::S3ListPage page = conveyor::parse_s3_list_page(text);
        (void)page;
      } catch (const conveyor::Error& e) {
        if (e.kind() != conveyor::ErrorKind::kRead) std::abort();
      }
      break;
    case 1: {
      const std::string code = conveyor::s3_error_code(text);
      if (code.size() > 64 ||
          code.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") !=
              std::string::npos) {
        std::abort();
      }
      break;
    }
    case 2:
      (void)conveyor::parse_aws_ini(text);
      break;
    default:
      try {
        const auto [bucket, key] = conveyor::split_s3_url(text);
        if (bucket.empty() || bucket.find('/') != std::string::npos) std::abort();
      } catch (const conveyor::Error& e) {
        if (e.kind() != conveyor::ErrorKind::kConfig) std::abort();
      }
  }
  return 0;
}
