// Regression tests for inputs found by cpp/fuzz/coco_fuzzer.cc (the raw inputs
// are also kept in tests/fuzz-regressions/coco_fuzzer/ and replayed by
// `make fuzz`).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "conveyor/core/error.h"
#include "conveyor/io/coco.h"

namespace conveyor {
namespace {

namespace fs = std::filesystem;

// read_coco() of `text`: the cause of the Error it throws, or "" when it parses.
std::string coco_error(const std::string& text) {
  const fs::path path = fs::temp_directory_path() / ("conveyor_coco_regression_" + std::to_string(::getpid()));
  std::ofstream(path) << text;
  std::string cause;
  try {
    read_coco(path.string());
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_EQ(e.key(), path.string());
    cause = e.cause();
  }
  fs::remove(path);
  return cause;
}

// A float id outside int64's range was cast to int64: undefined behaviour
// (UBSan: "1e+30 is outside the range of representable values of type 'long'").
TEST(CocoFuzzRegression, FloatIdsOutOfInt64RangeAreSchemaErrors) {
  for (const char* id : {"1e30", "-1e30", "9223372036854775808.0", "1e308", "-9.3e18"}) {
    const std::string cause = coco_error(std::string(R"({"images": [{"id": )") + id + R"(, "file_name": "a"}]})");
    EXPECT_NE(cause.find("images[0].id: expected an integer"), std::string::npos) << id << ": " << cause;
  }
  // Whole floats in range are still ids (some exporters write 1.0), down to int64's minimum.
  EXPECT_EQ(
      coco_error(R"({"images": [{"id": 2.0, "file_name": "a"}, {"id": -9223372036854775808.0, "file_name": "b"}]})"),
      "");
  EXPECT_NE(coco_error(R"({"images": [{"id": 1.5, "file_name": "a"}]})").find("expected an integer"),
            std::string::npos);
}

}  // namespace
}  // namespace conveyor
