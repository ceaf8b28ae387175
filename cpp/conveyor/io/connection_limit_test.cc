#include "conveyor/io/connection_limit.h"

#include <gtest/gtest.h>

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using Clock = ConnectionLimit::Clock;

TEST(ConnectionLimitTest, StartsAtTheInitialValueWithinOneAndTheMaximum) {
  EXPECT_EQ(ConnectionLimit(16, 256).value(), 16);
  EXPECT_EQ(ConnectionLimit(16, 4).value(), 4);
  EXPECT_EQ(ConnectionLimit(0, 4).value(), 1);
}

TEST(ConnectionLimitTest, GrowsByOnePerSuccessWhileRequestsQueueUntilTheFirstOverload) {
  ConnectionLimit limit(4, 100);
  const Clock::time_point t0{};
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(limit.record(false, true, t0));
  EXPECT_EQ(limit.value(), 8);  // One round of 4 successes doubled it.
  limit.record(false, false, t0);
  EXPECT_EQ(limit.value(), 8);  // Nothing waits: more connections would not help.
}

TEST(ConnectionLimitTest, HalvesOnOverloadOncePerCooldownThenGrowsByOnePerRound) {
  ConnectionLimit limit(32, 100, 1s);
  const Clock::time_point t0 = Clock::time_point{} + 10s;
  EXPECT_TRUE(limit.record(true, true, t0));
  EXPECT_EQ(limit.value(), 16);
  // The requests in flight report the same overload: no second halving yet.
  EXPECT_FALSE(limit.record(true, true, t0 + 500ms));
  EXPECT_EQ(limit.value(), 16);
  EXPECT_TRUE(limit.overloaded_once());
  for (int i = 0; i < 15; ++i) limit.record(false, true, t0 + 2s);
  EXPECT_EQ(limit.value(), 16);
  limit.record(false, true, t0 + 2s);  // The 16th success of the round.
  EXPECT_EQ(limit.value(), 17);
  EXPECT_TRUE(limit.record(true, true, t0 + 2s));
  EXPECT_EQ(limit.value(), 8);
}

TEST(ConnectionLimitTest, NeverLeavesOneToTheMaximum) {
  ConnectionLimit limit(2, 3, 0s);
  Clock::time_point now{};
  for (int i = 0; i < 5; ++i) limit.record(true, true, now += 1s);
  EXPECT_EQ(limit.value(), 1);
  for (int i = 0; i < 100; ++i) limit.record(false, true, now);
  EXPECT_EQ(limit.value(), 3);
}

// A simulated server that accepts `capacity` requests at once and overloads
// past it, one round of requests every 300 ms: the limit settles between
// capacity/2 and capacity + 2 (a round may end within the cooldown), never
// collapsing to 1 nor running away.
TEST(ConnectionLimitTest, SettlesNearWhatAServerCanTake) {
  constexpr int kCapacity = 6;
  ConnectionLimit limit(16, 256, 1s);
  Clock::time_point now{};
  int lowest = 1000, highest = 0;
  for (int round = 0; round < 200; ++round) {
    now += 300ms;
    const int in_flight = limit.value();
    for (int i = 0; i < in_flight; ++i) limit.record(in_flight > kCapacity && i == 0, true, now);
    if (round >= 20) {
      lowest = std::min(lowest, limit.value());
      highest = std::max(highest, limit.value());
    }
  }
  EXPECT_GE(lowest, kCapacity / 2);
  EXPECT_LE(highest, kCapacity + 2);
}

}  // namespace
}  // namespace conveyor
