#include "conveyor/core/version.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>

namespace conveyor {
namespace {

TEST(VersionTest, IsMajorMinorPatch) {
  // Three numbers joined by dots (no <regex>: it alone takes seconds to compile).
  const std::string_view v = version();
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  EXPECT_EQ(std::count(v.begin(), v.end(), '.'), 2) << v;
  EXPECT_TRUE(!v.empty() && is_digit(v.front()) && is_digit(v.back())) << v;
  EXPECT_EQ(v.find(".."), std::string_view::npos) << v;
  EXPECT_TRUE(std::all_of(v.begin(), v.end(), [&](char c) { return c == '.' || is_digit(c); })) << v;
}

}  // namespace
}  // namespace conveyor
