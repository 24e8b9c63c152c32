// dualcast/tensor/detail/spin_lock.hpp: a lock for critical sections of a few instructions (the
// pool's free lists). Taken by one atomic exchange and released by a plain store, where a
// std::mutex costs an atomic read-modify-write each way and two calls: a tape on small arrays
// allocates and frees about twenty blocks per node, and the mutex was some 2 % of a D-LSTM's
// gradient (issue 36). A waiter spins on a load, and yields its core now and then so that a
// holder that was preempted gets to run.
#pragma once

#include <atomic>
#include <thread>

namespace dualcast::detail {

class spin_lock {
public:
  void lock() noexcept {
    while (held_.exchange(true, std::memory_order_acquire))
      for (int spins = 1; held_.load(std::memory_order_relaxed); ++spins)
        if (spins % 64 == 0)
          std::this_thread::yield();
#if defined(__x86_64__) || defined(__i386__)
        else
          __builtin_ia32_pause();
#endif
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

private:
  std::atomic<bool> held_{false};
};

} // namespace dualcast::detail
