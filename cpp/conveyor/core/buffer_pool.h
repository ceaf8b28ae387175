#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

namespace conveyor {

/// How a BufferPool obtains and frees memory. The default is 64-byte aligned
/// host memory; the Python layer can supply page-locked (pinned) memory.
/// Both functions may be called from any thread.
struct BufferAllocator {
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void* data, size_t bytes)> deallocate;

  /// 64-byte aligned heap memory (operator new with std::align_val_t).
  static BufferAllocator aligned();
};

namespace detail {
struct BufferPoolState;
}

/// A buffer leased from a BufferPool; returns to the pool when destroyed.
/// Move-only. Keeps the pool's storage alive, so it may outlive the pool object
/// (e.g. a torch tensor held after its loader was deleted).
class PooledBuffer {
 public:
  PooledBuffer() = default;
  PooledBuffer(PooledBuffer&& other) noexcept;
  PooledBuffer& operator=(PooledBuffer&& other) noexcept;
  PooledBuffer(const PooledBuffer&) = delete;
  PooledBuffer& operator=(const PooledBuffer&) = delete;
  ~PooledBuffer();

  void* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  explicit operator bool() const noexcept { return data_ != nullptr; }

 private:
  friend class BufferPool;
  PooledBuffer(std::shared_ptr<detail::BufferPoolState> state, void* data, size_t size) noexcept;
  void release() noexcept;

  std::shared_ptr<detail::BufferPoolState> state_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

/// Recycles equally sized buffers (one per batch). acquire() reuses a free
/// buffer or allocates a new one; the caller bounds how many are leased at
/// once (the loader allows `prefetch` ahead of the consumer), so memory is
/// prefetch + batches held by the consumer, independent of epochs and dataset
/// size. Buffers are freed when the pool and every lease are gone; in a child
/// of fork() a pool created before the fork leaks its buffers instead (its
/// lock may be held by a thread that does not exist there).
///
/// Thread-safety: all methods may be called concurrently.
class BufferPool {
 public:
  explicit BufferPool(size_t buffer_bytes, BufferAllocator allocator = BufferAllocator::aligned());
  ~BufferPool();

  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  /// Leases a buffer of buffer_bytes() bytes (contents unspecified).
  PooledBuffer acquire();

  size_t buffer_bytes() const noexcept;
  /// Buffers allocated so far (leased + free): the high-water mark of leases.
  size_t allocated() const;
  /// Buffers currently leased.
  size_t leased() const;

 private:
  std::shared_ptr<detail::BufferPoolState> state_;
};

/// Recycles buffers of any size (variable-shape samples, one buffer each): a
/// request is rounded up to its size class -- the next of 2^k x {1, 1.25,
/// 1.5, 1.75}, at least 4 KiB, so at most 25% is wasted -- and served by that
/// class's BufferPool. Each class keeps no more buffers than were leased
/// from it at once, so memory is bounded by the peak of buffers held at once
/// per class (the caller bounds those), not by how many were ever requested.
///
/// Thread-safety: all methods may be called concurrently.
class SizedBufferPool {
 public:
  explicit SizedBufferPool(BufferAllocator allocator = BufferAllocator::aligned());

  /// Leases a buffer of at least `bytes` bytes (its size() is the class's).
  /// Throws std::bad_alloc when the memory cannot be had.
  PooledBuffer acquire(size_t bytes);

  /// The size class of `bytes`: what acquire(bytes) leases. Throws
  /// std::bad_alloc beyond half the address space.
  static size_t size_class(size_t bytes);

  /// Buffers allocated so far over every class (leased + free).
  size_t allocated() const;
  /// Buffers currently leased.
  size_t leased() const;

 private:
  BufferAllocator allocator_;
  mutable std::mutex mu_;
  std::map<size_t, std::unique_ptr<BufferPool>> pools_;  // By size class.
};

}  // namespace conveyor
