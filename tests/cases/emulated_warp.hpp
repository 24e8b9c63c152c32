// A warp on the CPU: 32 threads run a row operation's lanes in lockstep at its collective calls
// (reduce, scan, group_of, broadcast, sync), with the same butterfly as CUDA's warp_lanes
// (backend/cuda/for_each.cuh). The GPU-shaped paths of the row operations (online softmax, the
// lane-split convolution, the scatter combining colliding writes) thus run and are checked on
// machines without a GPU; on a GPU, gpu_tests runs the real warps.
#pragma once

#include <dualcast/arrays/shape.hpp>

#include <array>
#include <barrier>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

namespace dualcast_tests {

class emulated_warp {
public:
  static constexpr int width = 32;

  // Every lane's view of the warp: the interface of the backends' lanes.
  struct lanes {
    emulated_warp *warp;
    int lane_;
    int lane() const { return lane_; }
    static constexpr int count() { return width; }
    template <class T, class Op> T reduce(T x, Op const &op) const {
      for (int offset = width / 2; offset > 0; offset /= 2)
        x = op(x, warp->exchange(lane_, x, lane_ ^ offset));
      return x;
    }
    template <class T, class Op> T scan(T x, Op const &op) const {
      for (int d = 1; d < width; d *= 2) {
        T const earlier = warp->exchange(lane_, x, lane_ >= d ? lane_ - d : lane_);
        if (lane_ >= d)
          x = op(earlier, x);
      }
      return x;
    }
    unsigned group_of(dualcast::index_t key) const {
      warp->publish(lane_, key);
      unsigned mask = 0;
      for (int k = 0; k < width; ++k)
        if (warp->read<dualcast::index_t>(k) == key)
          mask |= 1u << k;
      warp->sync();
      return mask;
    }
    template <class T> T broadcast(T x, int from) const { return warp->exchange(lane_, x, from); }
    void sync() const { warp->sync(); }
  };

  // f(r, lanes) for every row, each row by 32 threads.
  template <class F> static void run_rows(dualcast::index_t rows, F const &f) {
    for (dualcast::index_t r = 0; r < rows; ++r) {
      emulated_warp w;
      std::vector<std::thread> threads;
      for (int l = 0; l < width; ++l)
        threads.emplace_back([&w, &f, r, l] { f(r, lanes{&w, l}); });
      for (auto &t : threads)
        t.join();
    }
  }

private:
  std::barrier<> barrier_{width};
  std::array<std::array<unsigned char, 32>, width> slot_{};

  void sync() { barrier_.arrive_and_wait(); }
  template <class T> void publish(int lane, T const &x) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 32);
    std::memcpy(slot_[std::size_t(lane)].data(), &x, sizeof(T));
    sync();
  }
  template <class T> T read(int lane) const {
    T x;
    std::memcpy(&x, slot_[std::size_t(lane)].data(), sizeof(T));
    return x;
  }
  // Publishes x, returns lane `from`'s value once every lane has published.
  template <class T> T exchange(int lane, T const &x, int from) {
    publish(lane, x);
    T const other = read<T>(from);
    sync();
    return other;
  }
};

} // namespace dualcast_tests
