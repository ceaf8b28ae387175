#include "conveyor/io/connection_limit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

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
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(limit.record(false, true, t0, t0, 4));
  EXPECT_EQ(limit.value(), 8);  // One round of 4 successes doubled it.
  limit.record(false, false, t0, t0, 8);
  EXPECT_EQ(limit.value(), 8);  // Nothing waits: more connections would not help.
}

TEST(ConnectionLimitTest, BeforeTheFirstAnswerGrowsByOnePerNewConnectionOnceRequestsWait) {
  ConnectionLimit limit(4, 12);
  EXPECT_TRUE(limit.counts_connections());
  for (int i = 0; i < 4; ++i) limit.connected();
  EXPECT_EQ(limit.value(), 4);  // Nothing waits yet: more connections would not help...
  EXPECT_TRUE(limit.waiting());
  EXPECT_EQ(limit.value(), 8);    // ... until requests wait: four connections taken at once.
  EXPECT_FALSE(limit.waiting());  // Each connection counts once.
  for (int i = 0; i < 6; ++i) limit.connected();
  EXPECT_TRUE(limit.waiting());
  EXPECT_EQ(limit.value(), 12);  // Never past the maximum.
}

TEST(ConnectionLimitTest, FromTheFirstAnswerOrOverloadConnectionsNoLongerCount) {
  const Clock::time_point t0 = Clock::time_point{} + 10s;
  ConnectionLimit answered(4, 100);
  answered.record(false, false, t0, t0, 1);
  EXPECT_FALSE(answered.counts_connections());
  answered.connected();
  EXPECT_FALSE(answered.waiting());  // A server that closes each connection (HTTP/1.0) does not run it up.
  EXPECT_EQ(answered.value(), 4);
  ConnectionLimit overloaded(4, 100);
  overloaded.connected();
  overloaded.record(true, true, t0, t0, 4);
  EXPECT_FALSE(overloaded.waiting());  // What was counted before the cut is forgotten.
  EXPECT_EQ(overloaded.value(), 2);
}

TEST(ConnectionLimitTest, AnOverloadHalvesWhatWasInFlightWhenTheRequestStarted) {
  ConnectionLimit limit(64, 256, 1s);
  const Clock::time_point t0 = Clock::time_point{} + 10s;
  // The limit reached 64 while the overloaded request, started among 12, was
  // waiting out its retransmitted SYN: the cut is to 6, not 32.
  EXPECT_TRUE(limit.record(true, true, t0, t0 - 1s, 12));
  EXPECT_EQ(limit.value(), 6);
  EXPECT_TRUE(limit.overloaded_once());
  // Requests started before the cut report the same overload: no second cut.
  EXPECT_FALSE(limit.record(true, true, t0 + 1500ms, t0 - 1ms, 40));
  EXPECT_EQ(limit.value(), 6);
  // One started after it is a new overload.
  EXPECT_TRUE(limit.record(true, true, t0 + 1500ms, t0 + 400ms, 6));
  EXPECT_EQ(limit.value(), 3);
}

TEST(ConnectionLimitTest, OnceOverloadedItGrowsByOnePerRoundAndPerCooldown) {
  ConnectionLimit limit(16, 100, 1s);
  const Clock::time_point t0 = Clock::time_point{} + 10s;
  limit.record(true, true, t0, t0, 16);
  EXPECT_EQ(limit.value(), 8);
  for (int i = 0; i < 7; ++i) limit.record(false, true, t0 + 2s, t0 + 2s, 8);
  EXPECT_EQ(limit.value(), 8);
  limit.record(false, true, t0 + 2s, t0 + 2s, 8);  // The 8th success of the round.
  EXPECT_EQ(limit.value(), 9);
  for (int i = 0; i < 20; ++i) limit.record(false, true, t0 + 2500ms, t0 + 2500ms, 9);
  EXPECT_EQ(limit.value(), 9);  // Two rounds, but within the cooldown of the last growth.
  limit.record(false, true, t0 + 3s, t0 + 3s, 9);
  EXPECT_EQ(limit.value(), 10);
  EXPECT_TRUE(limit.record(true, true, t0 + 3s, t0 + 3s, 10));
  EXPECT_EQ(limit.value(), 5);
}

TEST(ConnectionLimitTest, NeverLeavesOneToTheMaximum) {
  ConnectionLimit limit(2, 3, 0s);
  Clock::time_point now{};
  for (int i = 0; i < 5; ++i) {
    now += 1s;
    limit.record(true, true, now, now, limit.value());
  }
  EXPECT_EQ(limit.value(), 1);
  for (int i = 0; i < 100; ++i) {
    now += 1s;
    limit.record(false, true, now, now, limit.value());
  }
  EXPECT_EQ(limit.value(), 3);
}

// A simulated server whose listen queue holds `kCapacity` connects: a round
// of requests every 100 ms, and one started with more in flight than that
// reports its overload a second later (a retransmitted SYN). From slow
// start's overshoot the limit comes down at once and then stays between
// kCapacity / 2 and kCapacity + 2 (it grows once more while the late signal
// is on its way): never collapsing to 1 nor running away.
TEST(ConnectionLimitTest, SettlesNearWhatAServerCanTakeThoughOverloadIsSeenLate) {
  constexpr int kCapacity = 6;
  ConnectionLimit limit(4, 256, 1s);
  Clock::time_point now{};
  struct Late {
    Clock::time_point seen, started;
    int in_flight;
  };
  std::vector<Late> late;  // Overloads on their way.
  int lowest = 1000, highest = 0;
  for (int round = 0; round < 300; ++round) {
    now += 100ms;
    bool overloaded_now = false;
    for (auto it = late.begin(); it != late.end();) {
      if (it->seen <= now) {
        limit.record(true, true, now, it->started, it->in_flight);
        overloaded_now = true;
        it = late.erase(it);
      } else {
        ++it;
      }
    }
    const int in_flight = limit.value();  // This round's requests.
    if (in_flight > kCapacity) late.push_back({now + 1s, now, in_flight});
    for (int i = 0; i < in_flight - (in_flight > kCapacity ? 1 : 0); ++i) {
      limit.record(false, true, now, now, in_flight);
    }
    if (round >= 50 && !overloaded_now) {
      lowest = std::min(lowest, limit.value());
      highest = std::max(highest, limit.value());
    }
  }
  EXPECT_GE(lowest, kCapacity / 2);
  EXPECT_LE(highest, kCapacity + 2);
}

}  // namespace
}  // namespace conveyor
