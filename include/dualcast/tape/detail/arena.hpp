// dualcast/tape/detail/arena.hpp: a bump allocator. A tape keeps its nodes here, so recording a
// node costs a pointer increment instead of a trip to the heap, and clearing the tape frees them
// all at once while keeping the memory for the next iteration.
//
// A tape that is destroyed instead of cleared (one tape per training step, in a loop) hands its
// blocks to a cache of its thread, where the next tape's arena finds them: without it each step
// got fresh pages from the operating system and paid a page fault per 4 KiB touched (about a
// quarter of the D-LSTM gradient's time, bench/tape_overhead).
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace dualcast::detail {

// Memory blocks of arenas (new[] of std::byte: aligned to max_align_t).
struct arena_block {
  std::unique_ptr<std::byte[]> mem;
  std::size_t size;
};

// The blocks of destroyed arenas, per thread, up to `limit` bytes (the rest is freed).
class arena_block_cache {
public:
  static constexpr std::size_t limit = std::size_t(256) << 20;
  static arena_block_cache &of_this_thread() {
    thread_local arena_block_cache cache;
    return cache;
  }
  // A cached block of at least `bytes`, the smallest such; else an empty block.
  arena_block take(std::size_t bytes) {
    std::size_t best = blocks_.size();
    for (std::size_t i = 0; i < blocks_.size(); ++i)
      if (blocks_[i].size >= bytes &&
          (best == blocks_.size() || blocks_[i].size < blocks_[best].size))
        best = i;
    if (best == blocks_.size())
      return {};
    arena_block b = std::move(blocks_[best]);
    blocks_.erase(blocks_.begin() + std::ptrdiff_t(best));
    bytes_ -= b.size;
    return b;
  }
  void give(arena_block &&b) {
    if (bytes_ + b.size > limit)
      return; // freed with b
    bytes_ += b.size;
    blocks_.push_back(std::move(b));
  }
  std::size_t bytes() const { return bytes_; }

private:
  std::vector<arena_block> blocks_;
  std::size_t bytes_ = 0;
};

class arena {
public:
  arena() = default;
  arena(arena const &) = delete;
  arena &operator=(arena const &) = delete;
  ~arena() {
    auto &cache = arena_block_cache::of_this_thread();
    for (auto &b : blocks_)
      cache.give(std::move(b));
  }

  // `bytes` of memory aligned to `align` (a power of two, at most alignof(std::max_align_t)),
  // valid until reset().
  void *allocate(std::size_t bytes, std::size_t align) {
    for (;;) {
      if (current_ < blocks_.size()) {
        arena_block &b = blocks_[current_];
        std::size_t at = (used_ + align - 1) & ~(align - 1);
        if (at + bytes <= b.size) {
          bytes_used_ += at + bytes - used_;
          used_ = at + bytes;
          return b.mem.get() + at;
        }
        ++current_; // the next kept block, if any, or a new one
        used_ = 0;
        if (current_ < blocks_.size() && blocks_[current_].size >= bytes + align)
          continue;
      }
      std::size_t size = blocks_.empty() ? first_block : 2 * blocks_.back().size;
      while (size < bytes + align)
        size *= 2;
      arena_block b = arena_block_cache::of_this_thread().take(size);
      if (!b.mem)
        b = arena_block{std::unique_ptr<std::byte[]>(new std::byte[size]), size};
      blocks_.insert(blocks_.begin() + std::ptrdiff_t(current_), std::move(b));
      used_ = 0;
    }
  }
  template <class X, class... A> X *make(A &&...a) {
    static_assert(alignof(X) <= alignof(std::max_align_t));
    return ::new (allocate(sizeof(X), alignof(X))) X(static_cast<A &&>(a)...);
  }
  // Forgets everything allocated; the blocks are kept for reuse.
  void reset() {
    current_ = 0;
    used_ = 0;
    bytes_used_ = 0;
  }
  // Bytes handed out since the last reset(), alignment padding included (not the unused ends of
  // blocks): what the tape's nodes cost in bookkeeping, measured (bench/tape_overhead, tests).
  std::size_t bytes_used() const { return bytes_used_; }
  std::size_t capacity() const {
    std::size_t c = 0;
    for (auto const &b : blocks_)
      c += b.size;
    return c;
  }

private:
  static constexpr std::size_t first_block = std::size_t(64) << 10;
  std::vector<arena_block> blocks_;
  std::size_t current_ = 0, used_ = 0, bytes_used_ = 0;
};

// n objects in an arena, default-constructed, destroyed with the array (their memory goes back
// when the arena is reset). The loops are out of line: an array of 40 gradient slots costs no
// more code than one of 4, whatever kernel it belongs to.
template <class X> class arena_array {
public:
  arena_array() = default;
  // (X may itself be a pointer -- a node's input slots -- whose size is what is meant here.)
  arena_array(arena &a, std::size_t n)
      : p_(static_cast<X *>(
            a.allocate(n * sizeof(X), alignof(X)))), // NOLINT(bugprone-sizeof-expression)
        n_(n) {
    construct(p_, n_);
  }
  arena_array(arena_array const &) = delete;
  arena_array &operator=(arena_array const &) = delete;
  arena_array(arena_array &&o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  arena_array &operator=(arena_array &&o) noexcept {
    if (this != &o) {
      destroy(p_, n_);
      p_ = o.p_, n_ = o.n_;
      o.p_ = nullptr, o.n_ = 0;
    }
    return *this;
  }
  ~arena_array() { destroy(p_, n_); }

  std::size_t size() const { return n_; }
  X &operator[](std::size_t i) const { return p_[i]; }
  X *begin() const { return p_; }
  X *end() const { return p_ + n_; }
  X *data() const { return p_; }
  // Gives up the objects (now the caller's to destroy), leaving the array empty.
  X *release() {
    X *p = p_;
    p_ = nullptr, n_ = 0;
    return p;
  }

private:
  [[gnu::noinline]] static void construct(X *p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      ::new (static_cast<void *>(p + i)) X();
  }
  [[gnu::noinline]] static void destroy(X *p, std::size_t n) noexcept {
    for (std::size_t i = 0; i < n; ++i)
      p[i].~X();
  }
  X *p_ = nullptr;
  std::size_t n_ = 0;
};

} // namespace dualcast::detail
