#include "conveyor/core/version.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>

namespace conveyor {
namespace {

TEST(VersionTest, IsMajorMinorPatch) {
  EXPECT_TRUE(std::regex_match(std::string(version()), std::regex(R"([0-9]+\.[0-9]+\.[0-9]+)"))) << version();
}

}  // namespace
}  // namespace conveyor
