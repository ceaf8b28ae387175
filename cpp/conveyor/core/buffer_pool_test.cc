#include "conveyor/core/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace conveyor {
namespace {

TEST(BufferPoolTest, RecyclesReleasedBuffers) {
  BufferPool pool(1024);
  void* first;
  {
    PooledBuffer a = pool.acquire();
    first = a.data();
    EXPECT_EQ(a.size(), 1024u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
    EXPECT_EQ(pool.leased(), 1u);
  }
  EXPECT_EQ(pool.leased(), 0u);
  PooledBuffer b = pool.acquire();
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(pool.allocated(), 1u);
}

TEST(BufferPoolTest, LargeBuffersAreAlignedAndWritableToTheirEnd) {
  BufferPool large(size_t{5} << 20);
  PooledBuffer a = large.acquire();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
  static_cast<uint8_t*>(a.data())[(size_t{5} << 20) - 1] = 1;
}

TEST(BufferPoolTest, AllocatedIsTheHighWaterMark) {
  BufferPool pool(16);
  {
    PooledBuffer a = pool.acquire(), b = pool.acquire(), c = pool.acquire();
    EXPECT_EQ(pool.allocated(), 3u);
  }
  for (int i = 0; i < 10; ++i) {
    PooledBuffer a = pool.acquire(), b = pool.acquire();
  }
  EXPECT_EQ(pool.allocated(), 3u);
}

TEST(BufferPoolTest, UsesTheAllocatorHookAndFreesEverything) {
  int allocations = 0, frees = 0;
  BufferAllocator counting{[&](size_t bytes) {
                             ++allocations;
                             return ::operator new(bytes);
                           },
                           [&](void* data, size_t) {
                             ++frees;
                             ::operator delete(data);
                           }};
  PooledBuffer survivor;
  {
    BufferPool pool(64, counting);
    PooledBuffer a = pool.acquire();
    survivor = pool.acquire();
  }
  // A lease outlives its pool (a tensor held after the loader is gone); the
  // memory is freed once the last lease is returned.
  EXPECT_EQ(allocations, 2);
  EXPECT_EQ(frees, 0);
  survivor = PooledBuffer();
  EXPECT_EQ(frees, 2);
}

TEST(SizedBufferPoolTest, RoundsUpToQuarterPowerOfTwoClasses) {
  EXPECT_EQ(SizedBufferPool::size_class(0), 4096u);
  EXPECT_EQ(SizedBufferPool::size_class(4096), 4096u);
  EXPECT_EQ(SizedBufferPool::size_class(4097), 5120u);
  EXPECT_EQ(SizedBufferPool::size_class(8192), 8192u);
  EXPECT_EQ(SizedBufferPool::size_class(196608), 196608u);  // 1.5 x 2^17.
  EXPECT_EQ(SizedBufferPool::size_class(196609), 229376u);  // 1.75 x 2^17.
  EXPECT_THROW(SizedBufferPool::size_class(std::numeric_limits<size_t>::max()), std::bad_alloc);
}

TEST(SizedBufferPoolTest, ReusesBuffersOfTheSameClass) {
  SizedBufferPool pool;
  void* first;
  {
    PooledBuffer a = pool.acquire(5000);
    EXPECT_EQ(a.size(), 5120u);
    first = a.data();
    PooledBuffer b = pool.acquire(100000);
    EXPECT_EQ(pool.leased(), 2u);
  }
  EXPECT_EQ(pool.leased(), 0u);
  PooledBuffer again = pool.acquire(4500);  // Same class as 5000: the same buffer.
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(pool.allocated(), 2u);
}

}  // namespace
}  // namespace conveyor
