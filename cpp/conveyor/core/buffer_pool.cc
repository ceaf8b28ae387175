#include "conveyor/core/buffer_pool.h"

#include <limits>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/core/fork_guard.h"

namespace conveyor {

namespace detail {
struct BufferPoolState {
  size_t buffer_bytes = 0;
  BufferAllocator allocator;
  std::mutex mu;
  std::vector<void*> free;
  size_t allocated = 0;
  size_t leased = 0;
  // In a child of fork() the pool is a copy: `mu` may be held by a thread
  // that does not exist there, and the allocator may not work (CUDA pinned
  // memory). The child then leaks the pool's buffers instead.
  const uint64_t fork_generation = conveyor::fork_generation();

  bool forked() const noexcept { return conveyor::fork_generation() != fork_generation; }

  ~BufferPoolState() {
    if (forked()) return;
    for (void* data : free) allocator.deallocate(data, buffer_bytes);
  }
};
}  // namespace detail

namespace {

// Plain memory, not transparent huge pages (madvise(MADV_HUGEPAGE)): a huge
// page needs a free 2 MiB block, and on a virtual machine whose balloon
// reports free memory to the host (virtio-balloon free page reporting) such a
// block is often one the host has taken back, so its first write faults on
// the host too. On the 2-core VM of docs/design/benchmarks.md ("Fresh memory
// and huge pages"), the first write of a 40 MB buffer took 4-5 ms with huge
// pages in 15 of 20 fresh processes, 9 ms in one and 17-110 ms in the other
// 4; with 4 KiB pages, 21-34 ms in every one. A buffer is written fresh once (the pool
// reuses it), but that once is on a new loader's first batch.
constexpr std::align_val_t kAlignment{64};

}  // namespace

BufferAllocator BufferAllocator::aligned() {
  return {[](size_t bytes) { return ::operator new(bytes, kAlignment); },
          [](void* data, size_t /*bytes*/) { ::operator delete(data, kAlignment); }};
}

PooledBuffer::PooledBuffer(std::shared_ptr<detail::BufferPoolState> state, void* data, size_t size) noexcept
    : state_(std::move(state)), data_(data), size_(size) {}

PooledBuffer::PooledBuffer(PooledBuffer&& other) noexcept
    : state_(std::move(other.state_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

PooledBuffer& PooledBuffer::operator=(PooledBuffer&& other) noexcept {
  if (this != &other) {
    release();
    state_ = std::move(other.state_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

PooledBuffer::~PooledBuffer() { release(); }

void PooledBuffer::release() noexcept {
  if (data_ == nullptr) return;
  if (state_->forked()) {
    data_ = nullptr;  // Leaked on purpose (see BufferPoolState::fork_generation).
    state_.reset();
    return;
  }
  {
    std::lock_guard lock(state_->mu);
    state_->free.push_back(data_);
    --state_->leased;
  }
  data_ = nullptr;
  state_.reset();
}

BufferPool::BufferPool(size_t buffer_bytes, BufferAllocator allocator)
    : state_(std::make_shared<detail::BufferPoolState>()) {
  check_config(allocator.allocate && allocator.deallocate, "buffer allocator needs allocate and deallocate");
  state_->buffer_bytes = buffer_bytes;
  state_->allocator = std::move(allocator);
}

BufferPool::~BufferPool() = default;

PooledBuffer BufferPool::acquire() {
  {
    std::lock_guard lock(state_->mu);
    if (!state_->free.empty()) {
      void* data = state_->free.back();
      state_->free.pop_back();
      ++state_->leased;
      return PooledBuffer(state_, data, state_->buffer_bytes);
    }
  }
  // Allocate outside the lock: a custom allocator may be slow (pinned memory).
  void* data = state_->allocator.allocate(state_->buffer_bytes);
  if (data == nullptr) throw std::bad_alloc();
  std::lock_guard lock(state_->mu);
  ++state_->allocated;
  ++state_->leased;
  return PooledBuffer(state_, data, state_->buffer_bytes);
}

size_t BufferPool::buffer_bytes() const noexcept { return state_->buffer_bytes; }

size_t BufferPool::allocated() const {
  std::lock_guard lock(state_->mu);
  return state_->allocated;
}

size_t BufferPool::leased() const {
  std::lock_guard lock(state_->mu);
  return state_->leased;
}

SizedBufferPool::SizedBufferPool(BufferAllocator allocator) : allocator_(std::move(allocator)) {
  check_config(allocator_.allocate && allocator_.deallocate, "buffer allocator needs allocate and deallocate");
}

size_t SizedBufferPool::size_class(size_t bytes) {
  constexpr size_t kSmallest = 4096;
  if (bytes <= kSmallest) return kSmallest;
  if (bytes > std::numeric_limits<size_t>::max() / 2) throw std::bad_alloc();
  size_t base = kSmallest;
  while (base * 2 <= bytes) base *= 2;  // The power of two at or below `bytes`.
  const size_t step = base / 4;
  return base + (bytes - base + step - 1) / step * step;
}

PooledBuffer SizedBufferPool::acquire(size_t bytes) {
  const size_t size = size_class(bytes);
  BufferPool* pool;
  {
    std::lock_guard lock(mu_);
    std::unique_ptr<BufferPool>& slot = pools_[size];
    if (slot == nullptr) slot = std::make_unique<BufferPool>(size, allocator_);
    pool = slot.get();  // Pools are never removed: the pointer stays valid.
  }
  return pool->acquire();
}

size_t SizedBufferPool::allocated() const {
  std::lock_guard lock(mu_);
  size_t total = 0;
  for (const auto& [size, pool] : pools_) total += pool->allocated();
  return total;
}

size_t SizedBufferPool::leased() const {
  std::lock_guard lock(mu_);
  size_t total = 0;
  for (const auto& [size, pool] : pools_) total += pool->leased();
  return total;
}

}  // namespace conveyor
