#include "conveyor/core/cancellation.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
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

namespace conveyor {
namespace {

TEST(CancellationSubscriptionTest, ACallbackRunsOnceAtCancelOrAtOnceWhenAlreadyCancelled) {
  Cancellation cancellation;
  int called = 0, dropped = 0, late = 0;
  Cancellation::Subscription subscription(cancellation, [&] { ++called; });
  {
    Cancellation::Subscription gone(cancellation, [&] { ++dropped; });
  }
  EXPECT_EQ(called, 0);
  cancellation.cancel();
  cancellation.cancel();
  EXPECT_EQ(called, 1);
  EXPECT_EQ(dropped, 0);  // Destroyed before the cancel: never called.
  Cancellation::Subscription after(cancellation, [&] { ++late; });
  EXPECT_EQ(late, 1);
}

TEST(CancellationSubscriptionTest, AWaitOnSomethingElseEndsAtCancel) {
  Cancellation cancellation;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread waiter([&] {
    Cancellation::Subscription subscription(cancellation, [&] {
      {
        std::lock_guard lock(mu);
        stop = true;
      }
      cv.notify_all();
    });
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return stop; });
  });
  cancellation.cancel();
  waiter.join();  // A lost wake-up would hang here (the test's timeout fails it).
  EXPECT_TRUE(stop);
}

}  // namespace
}  // namespace conveyor
