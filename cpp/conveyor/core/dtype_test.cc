#include "conveyor/core/dtype.h"

#include <gtest/gtest.h>

#include "conveyor/core/error.h"

namespace conveyor {
namespace {

TEST(DTypeTest, NamesRoundTrip) {
  for (DType dtype : {DType::kUInt8, DType::kInt64, DType::kFloat16, DType::kFloat32}) {
    EXPECT_EQ(parse_dtype(dtype_name(dtype)), dtype);
  }
  EXPECT_EQ((SampleSpec{{3, 4, 5}, DType::kFloat16}.num_bytes()), 120u);
}

TEST(DTypeTest, UnknownNameIsAConfigError) {
  try {
    parse_dtype("int32");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "unknown dtype 'int32' (uint8, int64, float16 or float32)");
  }
}

}  // namespace
}  // namespace conveyor
