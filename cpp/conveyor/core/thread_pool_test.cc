#include "conveyor/core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#endif

#include "conveyor/core/error.h"

namespace conveyor {
namespace {

TEST(ThreadPoolTest, RunsEveryTask) {
  std::atomic<int> done{0};
  std::promise<void> all_done;
  {
    ThreadPool pool(4, "test");
    EXPECT_EQ(pool.size(), 4);
    for (int i = 0; i < 1000; ++i) {
      pool.submit([&] {
        if (++done == 1000) all_done.set_value();
      });
    }
    all_done.get_future().wait();
  }
  EXPECT_EQ(done.load(), 1000);
}

TEST(ThreadPoolTest, DestructorDiscardsQueuedTasksAndJoins) {
  std::atomic<int> started{0};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto pool = std::make_unique<ThreadPool>(1, "test");
  pool->submit([&] {
    ++started;
    released.wait();
  });
  for (int i = 0; i < 100; ++i) pool->submit([&] { ++started; });
  while (started.load() == 0) std::this_thread::yield();
  EXPECT_EQ(pool->queued(), 100u);
  // Release the running task once the destructor has discarded the queue
  // (queued() drops to 0 while the destructor waits in join()).
  ThreadPool* raw = pool.get();
  std::thread releaser([&] {
    while (raw->queued() != 0) std::this_thread::yield();
    release.set_value();
  });
  pool.reset();  // Waits for the running task only.
  releaser.join();
  EXPECT_EQ(started.load(), 1);
}

TEST(ThreadPoolTest, SubmitFirstRunsAheadOfQueuedTasks) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> started{false};
  std::mutex mu;
  std::vector<int> order;
  {
    ThreadPool pool(1, "test");
    pool.submit([&] {
      started = true;
      released.wait();
    });
    while (!started.load()) std::this_thread::yield();
    for (int i : {1, 2}) {
      pool.submit([&, i] {
        std::lock_guard lock(mu);
        order.push_back(i);
      });
    }
    pool.submit_first([&] {
      std::lock_guard lock(mu);
      order.push_back(0);
    });
    release.set_value();
    while (pool.queued() != 0) std::this_thread::yield();
  }  // The destructor waits for the last task.
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

TEST(ThreadPoolTest, SubmitInOrderRunsQueuedTasksByOrderFifoWithinOne) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> started{false};
  std::mutex mu;
  std::vector<std::string> order;
  {
    ThreadPool pool(1, "test");
    pool.submit([&] {
      started = true;
      released.wait();
    });
    while (!started.load()) std::this_thread::yield();
    auto record = [&](std::string name) {
      return [&, name] {
        std::lock_guard lock(mu);
        order.push_back(name);
      };
    };
    pool.submit(record("plain"));  // The highest order.
    for (const auto& [key, name] :
         std::vector<std::pair<int64_t, std::string>>{{5, "5"}, {2, "2a"}, {7, "7"}, {2, "2b"}, {0, "0"}}) {
      pool.submit_in_order(key, record(name));
    }
    pool.submit_first(record("first"));  // The lowest.
    EXPECT_EQ(pool.queued(), 7u);
    release.set_value();
    while (pool.queued() != 0) std::this_thread::yield();
  }  // The destructor waits for the last task.
  EXPECT_EQ(order, (std::vector<std::string>{"first", "0", "2a", "2b", "5", "7", "plain"}));
}

TEST(ThreadPoolTest, RejectsZeroThreads) {
  try {
    ThreadPool pool(0, "test");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "thread pool size must be >= 1, got 0");
  }
}

}  // namespace
}  // namespace conveyor

namespace conveyor {
namespace {

TEST(ThreadPoolTest, AThreadTheSystemRefusesIsAnErrorAndTheStartedOnesAreJoined) {
  std::atomic<int> started{0}, exited{0};
  // The third thread is refused, as the OS does at an address-space limit.
  ThreadPool::ThreadStarter starter = [&](std::function<void()> body) {
    if (started.fetch_add(1) == 2)
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
    return std::thread([body = std::move(body), &exited] {
      body();
      ++exited;
    });
  };
  try {
    ThreadPool pool(5, "test", starter);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "cannot start thread 3 of 5 of the test pool (Resource temporarily unavailable)");
  }
  EXPECT_EQ(started.load(), 3);
  EXPECT_EQ(exited.load(), 2);  // Joined before the constructor threw.
  ThreadPool after(2, "test");  // The process goes on.
  std::promise<void> ran;
  after.submit([&] { ran.set_value(); });
  ran.get_future().wait();
}

#if defined(__linux__)
TEST(ThreadPoolTest, NamesItsThreads) {
  ThreadPool pool(1, "named-pool");
  std::promise<std::string> name;
  pool.submit([&] {
    char buffer[16] = {};
    pthread_getname_np(pthread_self(), buffer, sizeof buffer);
    name.set_value(buffer);
  });
  EXPECT_EQ(name.get_future().get(), "named-pool-0");
}
#endif

// Waits (yielding) until `done()` holds; false after a generous time, so that
// a bug becomes a failure, not a hung suite. Not a timing assertion.
template <typename F>
bool eventually(F done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

TEST(ThreadPoolResizeTest, GrowsAndShrinksThousandsOfTimesWhileTasksRunAndLosesNone) {
  constexpr int kTasks = 20000;
  std::atomic<int> done{0};
  ThreadPool pool(2, "test");
  std::thread submitter([&] {
    for (int i = 0; i < kTasks; ++i) pool.submit([&] { ++done; });
  });
  std::thread resizer([&] {
    for (int i = 0; i < 3000; ++i) pool.resize(1 + (i * 7) % 9);
  });
  // Tasks resize too (a pool thread may call it).
  std::atomic<int> resizing_tasks{0};
  for (int i = 0; i < 50; ++i) {
    pool.submit([&pool, &resizing_tasks, i] {
      pool.resize(1 + i % 4);
      ++resizing_tasks;
    });
  }
  submitter.join();
  resizer.join();
  ASSERT_TRUE(eventually([&] { return done.load() == kTasks && resizing_tasks.load() == 50; }));
  pool.resize(3);
  EXPECT_EQ(pool.size(), 3);
  ASSERT_TRUE(eventually([&] { return pool.running() == 3; }));
}

TEST(ThreadPoolResizeTest, ShrinkingNeverInterruptsARunningTask) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> started{0}, finished{0};
  ThreadPool pool(2, "test");
  for (int i = 0; i < 2; ++i) {
    pool.submit([&] {
      ++started;
      released.wait();
      ++finished;
    });
  }
  ASSERT_TRUE(eventually([&] { return started.load() == 2; }));
  pool.resize(1);  // Returns at once: both threads are busy.
  EXPECT_EQ(pool.size(), 1);
  EXPECT_EQ(pool.running(), 2);
  std::promise<void> later;
  pool.submit([&] { later.set_value(); });  // Queued, not dropped.
  release.set_value();
  later.get_future().wait();
  EXPECT_EQ(finished.load(), 2);
  ASSERT_TRUE(eventually([&] { return pool.running() == 1; }));
}

TEST(ThreadPoolResizeTest, AThreadRefusedWhileGrowingKeepsThePoolWorking) {
  std::atomic<int> started{0};
  ThreadPool::ThreadStarter starter = [&](std::function<void()> body) {
    if (started.fetch_add(1) == 2)
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
    return std::thread(std::move(body));
  };
  ThreadPool pool(2, "test", starter);
  try {
    pool.resize(4);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "cannot start thread 3 of 4 of the test pool (Resource temporarily unavailable)");
  }
  EXPECT_EQ(pool.size(), 2);
  EXPECT_EQ(pool.running(), 2);
  std::promise<void> ran;
  pool.submit([&] { ran.set_value(); });
  ran.get_future().wait();
  pool.resize(3);  // The starter accepts again.
  EXPECT_EQ(pool.running(), 3);
}

TEST(ThreadPoolResizeTest, RejectsZeroThreads) {
  ThreadPool pool(1, "test");
  try {
    pool.resize(0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "thread pool size must be >= 1, got 0");
  }
  EXPECT_EQ(pool.size(), 1);
}

TEST(ThreadPoolResizeTest, DestroyedRightAfterResizesJoinsEveryThread) {
  std::atomic<int> exited{0}, made{0};
  ThreadPool::ThreadStarter starter = [&](std::function<void()> body) {
    ++made;
    return std::thread([body = std::move(body), &exited] {
      body();
      ++exited;
    });
  };
  {
    ThreadPool pool(4, "test", starter);
    for (int i = 0; i < 200; ++i) {
      pool.submit([] {});
      pool.resize(1 + i % 6);
    }
  }
  EXPECT_EQ(exited.load(), made.load());
}

TEST(ThreadPoolTest, PoolsSubmittingToEachOtherShutDownBeforeEitherIsDestroyed) {
  // The Loader's two pools hand work to each other; a thread of one can be
  // inside the other's submit() when the work stops. shutdown() of both
  // first leaves nothing running or queued and makes submit() a no-op, so
  // destroying them then races with nothing. The race itself (destroying one
  // pool while the other's thread is in its submit()) is timing: TSan saw it
  // in Loader::close() in 1 of 20 runs beside a CPU burner, and this loop,
  // under TSan, is where it would show again.
  for (int round = 0; round < 50; ++round) {
    auto a = std::make_unique<ThreadPool>(2, "a");
    auto b = std::make_unique<ThreadPool>(2, "b");
    std::atomic<bool> stop{false};
    std::function<void()> to_b, to_a;
    to_b = [&] {
      if (!stop) b->submit(to_a);
    };
    to_a = [&] {
      if (!stop) a->submit(to_b);
    };
    for (int i = 0; i < 4; ++i) a->submit(to_b);
    std::this_thread::yield();
    stop = true;
    a->shutdown();
    b->shutdown();
    EXPECT_EQ(a->queued(), 0u);
    EXPECT_EQ(b->queued(), 0u);
    a->submit([] { FAIL() << "ran after shutdown"; });
    EXPECT_EQ(a->queued(), 0u);
    a->shutdown();  // Idempotent.
    a.reset();
    b.reset();
  }
}

}  // namespace
}  // namespace conveyor
