// dualcast/tensor/detail/recycling_allocator.hpp: an allocator for small objects that are made and
// dropped all the time -- the control blocks of tensors' storage handles and of tape variables'
// gradient slots (std::allocate_shared) -- that keeps freed blocks in a per-thread list and hands
// them out again: after the first iteration of a training loop these cost no call to malloc.
#pragma once

#include <cstddef>
#include <new>

namespace dualcast::detail {

// Freed blocks of one size on this thread. Trivially destructible, so that a block freed while
// the thread's other objects are destroyed at its exit still finds it (and is then freed).
template <std::size_t Size> struct block_list {
  struct node {
    node *next;
  };
  node *head = nullptr;
  std::size_t count = 0;
  bool closed = false; // the thread is exiting: free, do not keep
};
// Empties a thread's list when the thread exits.
template <std::size_t Size> struct block_list_closer {
  block_list<Size> *list;
  ~block_list_closer() {
    list->closed = true;
    while (list->head) {
      auto *n = list->head;
      list->head = n->next;
      ::operator delete(n);
    }
    list->count = 0;
  }
};
template <std::size_t Size> block_list<Size> &blocks() {
  thread_local block_list<Size> list;
  thread_local block_list_closer<Size> closer{&list}; // (registers the clean-up at first use)
  (void)closer;
  return list;
}

template <class T> struct recycling_allocator {
  using value_type = T;
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
  static constexpr std::size_t size = sizeof(T) < sizeof(void *) ? sizeof(void *) : sizeof(T);
  // Per thread and size: as many blocks as fit in 64 MiB, at least 16384. A long tape holds a
  // gradient slot (72 bytes with its control block, g++ 12; a gradient's tensor header while
  // backward holds one) and a storage handle per node output -- GradBench's lstm at l = 6,
  // c = 8192: about 100,000 of each -- and with a cap of 16384 the rest went back to malloc and
  // came from it again at the next tape, a cost per node that only long tapes paid.
  static constexpr std::size_t max_kept = (std::size_t(64) << 20) / size > (1 << 14)
                                              ? (std::size_t(64) << 20) / size
                                              : 1 << 14;

  recycling_allocator() = default;
  template <class U> recycling_allocator(recycling_allocator<U> const &) noexcept {}

  T *allocate(std::size_t n) {
    if (n == 1) {
      auto &l = blocks<size>();
      if (l.head) {
        auto *b = l.head;
        l.head = b->next;
        // The next block, asked for now: each pop reads its block's link, and on a long tape the
        // blocks were freed (by the previous tape) long before, out of cache -- that load was
        // half of tape::make_output's time (GradBench lstm, l = 2, c = 4096).
        __builtin_prefetch(l.head, 1);
        --l.count;
        return reinterpret_cast<T *>(b);
      }
      return static_cast<T *>(::operator new(size));
    }
    return static_cast<T *>(::operator new(n * sizeof(T)));
  }
  void deallocate(T *p, std::size_t n) noexcept {
    if (n == 1) {
      auto &l = blocks<size>();
      if (!l.closed && l.count < max_kept) {
        auto *b = reinterpret_cast<typename block_list<size>::node *>(p);
        b->next = l.head;
        l.head = b;
        ++l.count;
        return;
      }
    }
    ::operator delete(p);
  }
  friend bool operator==(recycling_allocator const &, recycling_allocator const &) { return true; }
};

} // namespace dualcast::detail
