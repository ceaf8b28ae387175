#include "conveyor/core/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstdint>

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

}  // namespace
}  // namespace conveyor
