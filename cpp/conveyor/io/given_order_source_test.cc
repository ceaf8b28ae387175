#include "conveyor/io/given_order_source.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "conveyor/core/error.h"

namespace conveyor {
namespace {

// Sample i is the byte i with label 10 + i, from the second part for i >= 5.
class TenSamples final : public Source {
 public:
  int64_t size() const override { return 10; }
  Record read(int64_t index) const override {
    return Record{Bytes::from_vector({static_cast<uint8_t>(index)}), 10 + index, key(index)};
  }
  std::string key(int64_t index) const override { return std::to_string(index) + ".png"; }
  int parts() const override { return 2; }
  int part_of(int64_t index) const override { return index >= 5 ? 1 : 0; }
  bool local_reads() const override { return true; }
};

std::string config_error(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.cause();
  }
  return "no error";
}

TEST(GivenOrderSourceTest, EachEpochFollowsTheOrderSetForItAndReadsAreTheInnerSources) {
  GivenOrderSource source(std::make_shared<TenSamples>(), 4);
  EXPECT_EQ(source.size(), 10);
  EXPECT_EQ(source.epoch_size(), 4);
  EXPECT_EQ(source.parts(), 2);
  EXPECT_EQ(source.part_of(7), 1);
  EXPECT_TRUE(source.local_reads());
  source.set_order(0, {3, 3, 9, 0});  // Repeats allowed: a sampler with replacement.
  EXPECT_EQ(source.epoch_order(1, 0, true), (std::vector<int64_t>{3, 3, 9, 0}));
  source.set_order(1, {1, 2, 3, 4});
  EXPECT_EQ(source.epoch_order(1, 1, false), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(source.read(9).label, 19);
  EXPECT_EQ(source.key(9), "9.png");
}

TEST(GivenOrderSourceTest, AnOrderOfAnotherLengthOrWithAnIndexOutsideTheSourceIsNamed) {
  GivenOrderSource source(std::make_shared<TenSamples>(), 4);
  EXPECT_EQ(config_error([&] {
              source.set_order(2, {1, 2, 3});
            }),
            "the sampler gave 3 indices for epoch 2, its length is 4");
  EXPECT_EQ(config_error([&] {
              source.set_order(2, {1, 2, 10, 3});
            }),
            "the sampler gave index 10 at position 2 of epoch 2; the source has 10 samples");
  EXPECT_EQ(config_error([&] {
              source.set_order(2, {-1, 2, 1, 3});
            }),
            "the sampler gave index -1 at position 0 of epoch 2; the source has 10 samples");
  EXPECT_EQ(config_error([&] { source.epoch_order(0, 2, false); }), "no sampler order was set for epoch 2");
  EXPECT_EQ(config_error([] { GivenOrderSource(std::make_shared<TenSamples>(), 0); }),
            "the sampler is empty (its length is 0)");
}

}  // namespace
}  // namespace conveyor
