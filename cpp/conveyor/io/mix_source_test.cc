#include "conveyor/io/mix_source.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "conveyor/core/error.h"

namespace conveyor {
namespace {

// `n` samples whose bytes are their index and whose key names the source.
class CountingSource final : public Source {
 public:
  CountingSource(std::string name, int64_t n) : name_(std::move(name)), n_(n) {}
  int64_t size() const override { return n_; }
  Record read(int64_t index) const override {
    EXPECT_GE(index, 0);
    EXPECT_LT(index, n_);
    return {Bytes::from_vector({static_cast<uint8_t>(index)}), index, key(index), {}};
  }
  std::string key(int64_t index) const override { return name_ + ":" + std::to_string(index); }

 private:
  std::string name_;
  int64_t n_;
};

std::shared_ptr<const Source> counting(const std::string& name, int64_t n) {
  return std::make_shared<CountingSource>(name, n);
}

// How often each key appears among `order`'s samples.
std::map<std::string, int> key_counts(const MixSource& mix, const std::vector<int64_t>& order) {
  std::map<std::string, int> counts;
  for (int64_t index : order) ++counts[mix.key(index)];
  return counts;
}

TEST(MixSourceTest, FirstExhaustedDrawsEachPartItsShareWithoutRepeats) {
  // 0.7 / 0.3 of sizes 100 / 20: b runs out first at 20 / 0.3 = 66 positions.
  const MixSource mix({counting("a", 100), counting("b", 20)}, {0.7, 0.3}, MixStop::kFirstExhausted);
  EXPECT_EQ(mix.epoch_size(), 66);
  EXPECT_EQ(mix.draws(), (std::vector<int64_t>{46, 20}));  // 46.2 and 19.8, largest remainder.
  const std::vector<int64_t> order = mix.epoch_order(5, 0, true);
  ASSERT_EQ(order.size(), 66u);
  const auto counts = key_counts(mix, order);
  EXPECT_EQ(counts.size(), 66u);  // No sample twice.
  int from_b = 0;
  for (const auto& [key, n] : counts) from_b += key.rfind("b:", 0) == 0 ? n : 0;
  EXPECT_EQ(from_b, 20);
  // The big part's unused samples change with the epoch.
  EXPECT_NE(key_counts(mix, mix.epoch_order(5, 1, true)), counts);
  // A function of (seed, epoch) only.
  EXPECT_EQ(mix.epoch_order(5, 0, true), order);
  EXPECT_NE(mix.epoch_order(6, 0, true), order);
}

TEST(MixSourceTest, AllExhaustedRepeatsSmallPartsWithTheirOwnIndices) {
  const MixSource mix({counting("a", 10), counting("b", 3)}, {1, 1}, MixStop::kAllExhausted);
  EXPECT_EQ(mix.epoch_size(), 20);  // a needs 10 / 0.5 positions.
  EXPECT_EQ(mix.draws(), (std::vector<int64_t>{10, 10}));
  EXPECT_EQ(mix.size(), 10 + 4 * 3);  // b goes through 4 cycles (10 draws of 3 samples).
  const std::vector<int64_t> order = mix.epoch_order(1, 0, false);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());  // Distinct indices ...
  const auto counts = key_counts(mix, order);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(counts.at("a:" + std::to_string(i)), 1);
  // ... though b's samples repeat: 10 draws over 3 samples, in order without shuffle.
  EXPECT_EQ(counts.at("b:0"), 4);
  EXPECT_EQ(counts.at("b:1"), 3);
  EXPECT_EQ(counts.at("b:2"), 3);
  for (int64_t index : order) EXPECT_EQ(mix.read(index).key, mix.key(index));
}

TEST(MixSourceTest, NeverTakesTheGivenLengthAndOffsetsLabels) {
  const MixSource mix({counting("a", 4), counting("b", 5)}, {3, 1}, MixStop::kNever, 1000, {0, 100});
  EXPECT_EQ(mix.epoch_size(), 1000);
  EXPECT_EQ(mix.draws(), (std::vector<int64_t>{750, 250}));
  const std::vector<int64_t> order = mix.epoch_order(0, 3, true);
  int from_b = 0;
  for (int64_t index : order) {
    const Record r = mix.read(index);
    const bool b = r.key.rfind("b:", 0) == 0;
    from_b += b;
    EXPECT_EQ(mix.part_of(index), b ? 1 : 0);
    EXPECT_EQ(r.label, b ? 100 + std::stoi(r.key.substr(2)) : std::stoi(r.key.substr(2)));
  }
  EXPECT_EQ(from_b, 250);
  // Positions interleave the parts (not 750 of a, then 250 of b).
  int switches = 0;
  for (size_t p = 1; p < order.size(); ++p) switches += mix.part_of(order[p]) != mix.part_of(order[p - 1]);
  EXPECT_GT(switches, 100);
}

TEST(MixSourceTest, BadArgumentsAreConfigErrorsNamingThem) {
  const auto expect_config = [](auto make, const std::string& message) {
    try {
      make();
      FAIL() << "expected: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_EQ(e.cause(), message);
    }
  };
  expect_config([] { MixSource({}, {}, MixStop::kFirstExhausted); }, "Mix: needs at least one source");
  expect_config(
      [] {
        MixSource({counting("a", 1)}, {1, 2}, MixStop::kFirstExhausted);
      },
      "Mix: weights must have one value per source, got 2 for 1 sources");
  expect_config([] { MixSource({counting("a", 1)}, {0}, MixStop::kFirstExhausted); },
                "Mix: the weight of source 0 must be positive and finite");
  expect_config([] { MixSource({counting("a", 0)}, {1}, MixStop::kFirstExhausted); }, "Mix: source 0 has no samples");
  expect_config([] { MixSource({counting("a", 1)}, {1}, MixStop::kNever); }, "Mix: stop='never' needs epoch_size > 0");
  expect_config([] { MixSource({counting("a", 1)}, {1}, MixStop::kAllExhausted, 5); },
                "Mix: epoch_size is only for stop='never' (the other rules derive it)");
  expect_config(
      [] {
        MixSource({counting("a", 1)}, {1}, MixStop::kFirstExhausted, 0, {1, 2});
      },
      "Mix: label_offsets must have one value per source, got 2");
  expect_config(
      [] {
        MixSource({counting("a", 3), counting("b", 2)}, {1, 1e-300}, MixStop::kAllExhausted);
      },
      "Mix: stop='all_exhausted' would draw more than 2^62 samples before sources[1] (2 samples, a share of 1e-300 "
      "of the draws) runs out: raise its weight, or use stop='never' with an epoch_size");
}

// Labels chosen by the test; max_label() unknown unless `known`.
class LabelledSource final : public Source {
 public:
  LabelledSource(std::vector<int64_t> labels, bool known) : labels_(std::move(labels)), known_(known) {}
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Record read(int64_t index) const override {
    return {Bytes::from_vector({0}), labels_.at(static_cast<size_t>(index)), key(index), {}};
  }
  std::string key(int64_t index) const override { return "labelled[" + std::to_string(index) + "]"; }
  std::optional<int64_t> max_label() const override {
    if (!known_) return std::nullopt;
    return *std::max_element(labels_.begin(), labels_.end());
  }

 private:
  std::vector<int64_t> labels_;
  bool known_;
};

// Regression: offsets were added in int64 (undefined behaviour, negative labels in practice).
TEST(MixSourceTest, LabelOffsetsNeverWrap) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const auto known = std::make_shared<LabelledSource>(std::vector<int64_t>{3, -1, 7}, true);
  try {
    MixSource({counting("a", 2), known}, {1, 1}, MixStop::kFirstExhausted, 0, {0, kMax - 6});
    FAIL() << "expected a ConfigError";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(e.cause(),
              "Mix: label_offsets[1] (9223372036854775801) plus the largest label of sources[1] (7) is "
              "beyond int64 (9223372036854775807)");
  }
  const MixSource edge({known}, {1}, MixStop::kFirstExhausted, 0, {kMax - 7});
  EXPECT_EQ(edge.read(2).label, kMax);
  EXPECT_EQ(edge.read(1).label, -1);  // Unlabelled stays so.
  EXPECT_EQ(edge.max_label(), kMax);
  // A mixture's largest label is its parts', offsets added; unknown if one part's is.
  const auto small = std::make_shared<LabelledSource>(std::vector<int64_t>{0, 1, 2}, true);
  const MixSource outer({std::make_shared<MixSource>(edge), small}, {1, 1}, MixStop::kFirstExhausted);
  EXPECT_EQ(outer.max_label(), kMax);
  EXPECT_EQ(MixSource({small, counting("b", 3)}, {1, 1}, MixStop::kFirstExhausted).max_label(), std::nullopt);
  EXPECT_THROW(MixSource({std::make_shared<MixSource>(edge)}, {1}, MixStop::kFirstExhausted, 0, {1}), Error);
  // Labels known only once read: the read that would wrap is the sample's error.
  const auto unknown = std::make_shared<LabelledSource>(std::vector<int64_t>{1, kMax}, false);
  const MixSource late({unknown}, {1}, MixStop::kFirstExhausted, 0, {1});
  EXPECT_EQ(late.max_label(), std::nullopt);
  EXPECT_EQ(late.read(0).label, 2);
  try {
    late.read(1);
    FAIL() << "expected a ReadError";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRead);
    EXPECT_EQ(e.key(), "labelled[1]");
    EXPECT_EQ(e.cause(), "label 9223372036854775807 plus label_offsets[0] (1) is beyond int64 (9223372036854775807)");
  }
}

TEST(MixSourceTest, LocateGivesThePartAndItsOwnIndex) {
  const MixSource mix({counting("a", 3), counting("b", 2)}, {1, 3}, MixStop::kAllExhausted);
  for (int64_t index = 0; index < mix.size(); ++index) {
    const auto [part, local] = mix.locate(index);
    EXPECT_EQ(mix.key(index), std::string(part == 0 ? "a:" : "b:") + std::to_string(local));
  }
  EXPECT_THROW(mix.locate(-1), Error);
  EXPECT_THROW(mix.locate(mix.size()), Error);
}

}  // namespace
}  // namespace conveyor
