#include "conveyor/core/dtype.h"

#include <gtest/gtest.h>

#include "conveyor/core/error.h"

namespace conveyor {
namespace {

TEST(DTypeTest, NamesRoundTrip) {
  for (DType dtype : {DType::kUInt8, DType::kInt64, DType::kFloat16, DType::kFloat32, DType::kBFloat16}) {
    EXPECT_EQ(parse_dtype(dtype_name(dtype)), dtype);
  }
  EXPECT_EQ((SampleSpec{{3, 4, 5}, DType::kFloat16}.num_bytes()), 120u);
  EXPECT_EQ((SampleSpec{{3, 4, 5}, DType::kBFloat16}.num_bytes()), 120u);
}

TEST(DTypeTest, UnknownNameIsAConfigError) {
  try {
    parse_dtype("int32");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "unknown dtype 'int32' (uint8, int64, float16, float32 or bfloat16)");
  }
}

TEST(DTypeTest, SampleSizesThatOverflowAreConfigErrors) {
  const int64_t big = int64_t{1} << 40;
  try {
    (void)SampleSpec{{3, big, big}, DType::kUInt8}.num_elements();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(),
                 "the element count of sample shape (3, 1099511627776, 1099511627776) overflows: "
                 "3298534883328 x 1099511627776");
  }
  try {
    (void)SampleSpec{{int64_t{1} << 62}, DType::kFloat32}.num_bytes();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(),
                 "the size in bytes of sample shape (4611686018427387904) overflows: 4611686018427387904 x 4");
  }
  EXPECT_THROW((void)SampleSpec({{3, -1}, DType::kUInt8}).num_bytes(), Error);
  EXPECT_EQ((SampleSpec{{int64_t{1} << 60}, DType::kFloat32}.num_bytes()), size_t{1} << 62);
}

}  // namespace
}  // namespace conveyor
