// dualcast/tensor/memory.hpp: host memory, a caching pool for tensor storage, and storage blocks.
//
//   dualcast::pool_resource& pool = dualcast::default_pool();
//   auto s = dualcast::storage::allocate(bytes, dualcast::device::host(), pool);
//
// A training loop allocates the same sizes every step; the pool keeps freed blocks in per-size
// free lists (sizes rounded up to a size class) and hands them out again, so after the first
// step no call reaches the system allocator. A device is a kind plus an index so that CUDA
// memory is another resource (backend/cuda/memory.cuh) behind a pool of its own.
#pragma once

#include <dualcast/backend/device.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/tensor/detail/recycling_allocator.hpp>
#include <dualcast/tensor/detail/spin_lock.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex> // (std::lock_guard)
#include <new>
#include <string>
#include <vector>

namespace dualcast {

// The system allocator for host memory, 64-byte aligned.
class host_resource final : public memory_resource {
public:
  void *allocate(std::size_t bytes, device const &d) override {
    if (!d.is_host())
      throw device_error("dualcast::host_resource: cannot allocate on " + to_string(d) +
                         " (no CUDA resource is configured)");
    constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
    std::size_t n = bytes <= max - 63 ? (bytes + 63) / 64 * 64 : 0; // 0: rounding would overflow
    void *p = n > 0 || bytes == 0 ? std::aligned_alloc(64, n > 0 ? n : 64) : nullptr;
    if (!p)
      throw allocation_error("dualcast: cannot allocate " + std::to_string(bytes) +
                             " bytes of host memory");
    return p;
  }
  void deallocate(void *p, std::size_t, device const &) noexcept override { std::free(p); }
};

// Caches freed blocks by size class (powers of two below 1 MiB, multiples of 1 MiB above, so a
// block is at most 2x / +1 MiB larger than asked) and serves later requests from the cache.
// Thread-safe. Statistics let tests and benchmarks see that a loop stops allocating. Not
// stream-ordered: a freed block goes to the next request at once, so over a CUDA resource it is
// safe only while all work on its blocks is on one stream (the tape's CUDA tensors use the
// stream-ordered cuda_pool_resource, backend/cuda/memory.cuh, instead).
class pool_resource final : public memory_resource {
public:
  struct stats_t {
    std::size_t system_allocations = 0; // calls that reached the upstream resource
    std::size_t reuses = 0;             // requests served from the cache
    std::size_t bytes_in_use = 0;       // handed out and not yet returned (size-class bytes)
    std::size_t peak_bytes_in_use = 0;
    std::size_t bytes_cached = 0; // held in free lists
  };

  // The default upstream (the system allocator) is created here, before the pool is complete, so
  // that it is destroyed after the pool: the pool's destructor still returns its cached blocks to
  // it (a function-local static created at the first allocation died first, and the pool's
  // destructor called a pure virtual function at exit in unoptimised builds).
  explicit pool_resource(memory_resource *upstream = nullptr)
      : upstream_(upstream ? upstream : &system_host()) {}
  pool_resource(pool_resource const &) = delete;
  pool_resource &operator=(pool_resource const &) = delete;
  ~pool_resource() override { release(); }

  // The largest request the pool serves (its size class still fits a size_t).
  static constexpr std::size_t max_bytes =
      std::numeric_limits<std::size_t>::max() / 2 - (std::size_t(1) << 20);

  static std::size_t size_class(std::size_t bytes) {
    constexpr std::size_t mib = std::size_t(1) << 20;
    if (bytes <= 64)
      return 64;
    if (bytes >= mib)
      return (bytes + mib - 1) / mib * mib;
    std::size_t c = 64;
    while (c < bytes)
      c <<= 1;
    return c;
  }

  void *allocate(std::size_t bytes, device const &d) override {
    if (bytes > max_bytes) // its size class would overflow
      throw allocation_error("dualcast::pool_resource: cannot allocate " + std::to_string(bytes) +
                             " bytes (more than the largest size class, " +
                             std::to_string(max_bytes) + " bytes)");
    std::size_t c = size_class(bytes);
    std::lock_guard<detail::spin_lock> lock(m_);
    auto &list = free_list(c, d);
    void *p;
    if (!list.empty()) {
      p = list.back();
      list.pop_back();
      // The next block's first line, to be written: on a long tape a recycled block was freed by
      // the previous tape, out of cache. Small blocks only (a tape's per-node arrays), where
      // that one line is a fair part of what the caller writes.
      if (!list.empty() && d.is_host() && c <= 4096)
        __builtin_prefetch(list.back(), 1);
      stats_.bytes_cached -= c;
      ++stats_.reuses;
    } else {
      try {
        p = up().allocate(c, d);
      } catch (std::bad_alloc const &) { // an upstream resource that throws the standard way
        throw allocation_error("dualcast::pool_resource: cannot allocate " + std::to_string(bytes) +
                               " bytes");
      }
      ++stats_.system_allocations;
    }
    stats_.bytes_in_use += c;
    if (stats_.bytes_in_use > stats_.peak_bytes_in_use)
      stats_.peak_bytes_in_use = stats_.bytes_in_use;
    return p;
  }
  void deallocate(void *p, std::size_t bytes, device const &d) noexcept override {
    std::size_t c = size_class(bytes);
    std::lock_guard<detail::spin_lock> lock(m_);
    try {
      free_list(c, d).push_back(p);
      stats_.bytes_cached += c;
    } catch (...) {
      up().deallocate(p, c, d);
    }
    stats_.bytes_in_use -= c;
  }
  // Returns every cached block to the upstream resource.
  void release() noexcept {
    std::lock_guard<detail::spin_lock> lock(m_);
    for (int i = 0; i < n_small; ++i) {
      for (void *p : small_[i])
        up().deallocate(p, std::size_t(64) << i, device::host());
      small_[i].clear();
    }
    for (auto &[k, list] : free_)
      for (void *p : list)
        up().deallocate(p, k.first, k.second);
    free_.clear();
    stats_.bytes_cached = 0;
  }
  stats_t stats() const {
    std::lock_guard<detail::spin_lock> lock(m_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<detail::spin_lock> lock(m_);
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }

private:
  struct dev_less {
    bool operator()(std::pair<std::size_t, device> const &a,
                    std::pair<std::size_t, device> const &b) const {
      if (a.first != b.first)
        return a.first < b.first;
      if (a.second.type != b.second.type)
        return a.second.type < b.second.type;
      return a.second.index < b.second.index;
    }
  };
  // Host blocks below 1 MiB (64 B to 512 KiB: the hot sizes of small arrays) in an array of
  // lists by size class; the rest in a map.
  static constexpr int n_small = 14;
  std::vector<void *> &free_list(std::size_t c, device const &d) {
    if (d.is_host() && c < (std::size_t(1) << 20)) {
      int i = 0;
      while ((std::size_t(64) << i) < c)
        ++i;
      return small_[i];
    }
    return free_[{c, d}];
  }
  static host_resource &system_host() {
    static host_resource host;
    return host;
  }
  memory_resource &up() { return *upstream_; }
  memory_resource *upstream_;
  mutable detail::spin_lock m_; // (the free lists: a few instructions per lock)
  std::vector<void *> small_[n_small];
  std::map<std::pair<std::size_t, device>, std::vector<void *>, dev_less> free_;
  stats_t stats_;
};

// The pool tensors use unless told otherwise (one per process).
inline pool_resource &default_pool() {
  static pool_resource pool;
  return pool;
}

// A block of memory owned by tensors (shared between a tensor and its views), with the version
// counter that detects in-place modification of tensors saved for backward. A block on a CUDA
// device is allocated on this thread's current stream (backend/stream.hpp) and freed on the same
// stream (memory_resource::allocate_on / deallocate_on): with the stream-ordered CUDA pool its
// memory goes to another request only after the work issued on that stream before the free. Work
// on other streams must not outlive the tensors it reads (as with cudaFreeAsync). Host blocks
// take the plain allocate / deallocate.
class storage {
public:
  storage(std::size_t bytes, device d, memory_resource &r)
      : ptr_(d.is_host() ? r.allocate(bytes, d) : r.allocate_on(bytes, d, current_stream())),
        bytes_(bytes), dev_(d), res_(&r),
        stream_(d.is_host() ? stream_handle{} : current_stream()) {}
  storage(storage const &) = delete;
  storage &operator=(storage const &) = delete;
  ~storage() {
    if (dev_.is_host())
      res_->deallocate(ptr_, bytes_, dev_);
    else
      res_->deallocate_on(ptr_, bytes_, dev_, stream_);
  }

  static std::shared_ptr<storage> allocate(std::size_t bytes, device d = device::host(),
                                           memory_resource &r = default_pool()) {
    return std::allocate_shared<storage>(detail::recycling_allocator<storage>{}, bytes, d, r);
  }
  void *data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  device const &dev() const { return dev_; }
  // The stream the block was allocated on (and will be freed on); the default stream for host
  // blocks.
  stream_handle stream() const { return stream_; }
  std::uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

private:
  void *ptr_;
  std::size_t bytes_;
  device dev_;
  memory_resource *res_;
  stream_handle stream_;
  std::uint64_t version_ = 0;
};

} // namespace dualcast
