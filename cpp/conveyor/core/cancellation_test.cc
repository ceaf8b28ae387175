#include "conveyor/core/cancellation.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

namespace conveyor {
namespace {

using namespace std::chrono_literals;

TEST(CancellationTest, CancelEndsAWaitThatAlreadyStarted) {
  Cancellation cancellation;
  std::promise<void> waiting;
  auto waited = std::async(std::launch::async, [&] {
    waiting.set_value();
    return cancellation.wait_for(std::chrono::hours(24));
  });
  waiting.get_future().wait();
  cancellation.cancel();
  // A day-long wait that ignored cancel() would fail here, not hang the suite.
  ASSERT_EQ(waited.wait_for(60s), std::future_status::ready);
  EXPECT_TRUE(waited.get());
  EXPECT_TRUE(cancellation.cancelled());
}

TEST(CancellationTest, WaitAfterCancelReturnsAtOnceAndShortWaitsTimeOut) {
  Cancellation cancellation;
  EXPECT_FALSE(cancellation.wait_for(1ms));
  cancellation.cancel();
  cancellation.cancel();  // Idempotent.
  EXPECT_TRUE(cancellation.wait_for(std::chrono::hours(24)));
}

TEST(CancellationTest, ScopesNestAndRestore) {
  Cancellation outer, inner;
  EXPECT_EQ(current_cancellation(), nullptr);
  EXPECT_FALSE(cancellation_requested());
  {
    ScopedCancellation a(outer);
    EXPECT_EQ(current_cancellation(), &outer);
    {
      ScopedCancellation b(inner);
      EXPECT_EQ(current_cancellation(), &inner);
      inner.cancel();
      EXPECT_TRUE(cancellation_requested());
      EXPECT_TRUE(sleep_unless_cancelled(std::chrono::hours(24)));
    }
    EXPECT_EQ(current_cancellation(), &outer);
    EXPECT_FALSE(cancellation_requested());
    EXPECT_FALSE(sleep_unless_cancelled(1ms));
  }
  EXPECT_EQ(current_cancellation(), nullptr);
  EXPECT_FALSE(sleep_unless_cancelled(1ms));
}

TEST(CancellationTest, ScopeIsPerThread) {
  Cancellation cancellation;
  cancellation.cancel();
  ScopedCancellation scope(cancellation);
  bool other_thread_sees = true;
  std::thread([&] { other_thread_sees = cancellation_requested(); }).join();
  EXPECT_FALSE(other_thread_sees);
  EXPECT_TRUE(cancellation_requested());
}

}  // namespace
}  // namespace conveyor
