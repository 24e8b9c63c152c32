// Concurrency: independent tapes and fused kernels used from several user threads at once give
// the same results, bit for bit, as sequential runs (the CPU backend's OpenMP teams nest inside
// the user's threads; the pool and the SIMD divergence flag are per-thread or locked).
#include <dualcast/autodiff.hpp>
#include <dualcast/dualcast.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>
#include <utility>
#include <vector>

namespace dc = dualcast;

namespace {

std::vector<double> random_values(long n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto &x : v)
    x = u(g);
  return v;
}

// One training-like step on its own tape: loss and gradients of a 2-layer network.
std::vector<double> tape_step(unsigned seed) {
  auto X = dc::tensor<double>::from({16, 8}, random_values(128, seed));
  auto W1 = dc::tensor<double>::from({8, 12}, random_values(96, seed + 1));
  auto W2 = dc::tensor<double>::from({12, 4}, random_values(48, seed + 2));
  auto B = dc::tensor<double>::from({12}, random_values(12, seed + 3));
  dc::tape tp;
  auto x = tp.constant(X);
  auto w1 = tp.variable(W1), w2 = tp.variable(W2), b = tp.variable(B);
  auto h = dc::tanh(dc::matmul(x, w1) + b);
  auto loss = dc::sum(dc::sigmoid(dc::matmul(h, w2)) * 0.5);
  tp.backward(loss);
  std::vector<double> out = loss.value().to_vector();
  for (auto const &g : {w1.grad(), w2.grad(), b.grad()}) {
    auto v = g.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// A fused kernel with a branch (divergent SIMD lanes) and a broadcast VJP, 2 OpenMP threads.
std::vector<float> fused_step(unsigned seed) {
  constexpr auto k = dc::kernel([](auto x, auto b) {
    auto y = x * b;
    if (y > 0)
      return dc::tanh(y) + x;
    return dc::sigmoid(y) * b;
  });
  const long rows = 300, cols = 257;
  std::vector<float> x(std::size_t(rows * cols)), b(static_cast<std::size_t>(cols)),
      ybar(x.size(), 1.0f);
  auto rx = random_values(rows * cols, seed), rb = random_values(cols, seed + 7);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = float(rx[i]);
  for (std::size_t i = 0; i < b.size(); ++i)
    b[i] = float(rb[i]);
  std::vector<float> y(x.size()), xbar(x.size()), bbar(b.size());
  dc::shape s{rows, cols}, row{cols};
  dc::apply(dc::cpu{2}, k, dc::out(dc::view<float>(y.data(), s)),
            dc::view<const float>(x.data(), s), dc::view<const float>(b.data(), row));
  dc::vjp(dc::cpu{2}, k,
          dc::out(dc::view<float>(xbar.data(), s), dc::view<float>(bbar.data(), row)),
          dc::in(dc::view<const float>(x.data(), s), dc::view<const float>(b.data(), row)),
          dc::in(dc::view<const float>(ybar.data(), s)));
  y.insert(y.end(), xbar.begin(), xbar.end());
  y.insert(y.end(), bbar.begin(), bbar.end());
  return y;
}

} // namespace

TEST_CASE("independent tapes on several threads equal sequential runs bit for bit") {
  constexpr int n = 4;
  std::vector<std::vector<double>> sequential, parallel(n);
  for (int t = 0; t < n; ++t)
    sequential.push_back(tape_step(100u + unsigned(t)));
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t)
    threads.emplace_back([t, &parallel] {
      for (int rep = 0; rep < 5; ++rep)
        parallel[std::size_t(t)] = tape_step(100u + unsigned(t));
    });
  for (auto &th : threads)
    th.join();
  for (int t = 0; t < n; ++t)
    CHECK(parallel[std::size_t(t)] == sequential[std::size_t(t)]);
}

TEST_CASE("fused kernels called from several user threads equal sequential runs bit for bit") {
  constexpr int n = 3;
  std::vector<std::vector<float>> sequential, parallel(n);
  for (int t = 0; t < n; ++t)
    sequential.push_back(fused_step(200u + unsigned(t)));
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t)
    threads.emplace_back([t, &parallel] {
      for (int rep = 0; rep < 3; ++rep)
        parallel[std::size_t(t)] = fused_step(200u + unsigned(t));
    });
  for (auto &th : threads)
    th.join();
  for (int t = 0; t < n; ++t)
    CHECK(parallel[std::size_t(t)] == sequential[std::size_t(t)]);
}

// A destroyed tape's arena blocks go to its thread's cache, where the next tape of that thread
// finds them (no fresh pages from the OS per training step); other threads keep their own.
TEST_CASE("arena blocks are reused by the next tape of the same thread") {
  auto &cache = dc::detail::arena_block_cache::of_this_thread();
  std::size_t const before = cache.bytes();
  std::size_t capacity = 0;
  {
    dc::detail::arena a;
    a.allocate(std::size_t(1) << 20, 16); // a block of 2 MiB (1 MiB + alignment, rounded up)
    capacity = a.capacity();
    CHECK(capacity >= (std::size_t(1) << 20));
  }
  CHECK(cache.bytes() == before + capacity);
  {
    dc::detail::arena a;
    void *p = a.allocate(std::size_t(1) << 20, 16);
    CHECK(p != nullptr);
    CHECK(cache.bytes() == before); // taken from the cache, not from the heap
    std::size_t other_start = 1, other_end = 0;
    std::thread other([&] {
      auto &mine = dc::detail::arena_block_cache::of_this_thread();
      other_start = mine.bytes();
      {
        dc::detail::arena b;
        b.allocate(100, 8);
      }
      other_end = mine.bytes();
    });
    other.join();
    CHECK(other_start == 0); // a new thread starts with an empty cache
    CHECK(other_end > 0);    // and keeps its own blocks
    CHECK(cache.bytes() == before);
  }
  CHECK(cache.bytes() == before + capacity);
  // Tapes go through the same path: a step recorded after one was destroyed reuses its memory
  // and computes the same gradient.
  auto const first = tape_step(5);
  CHECK(tape_step(5) == first);
}

// The pool's free lists under one lock (a spin lock): threads taking and returning blocks of
// several sizes at once each get blocks no other holds (filled with the thread's mark and read
// back), and the statistics add up when all are returned.
TEST_CASE("one pool used by several threads at once hands each block to one of them") {
  dc::pool_resource pool;
  constexpr int n = 4, rounds = 2000;
  std::vector<int> bad(n, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t)
    threads.emplace_back([t, &pool, &bad] {
      std::mt19937 g(static_cast<unsigned>(t));
      std::vector<std::pair<unsigned char *, std::size_t>> held;
      for (int r = 0; r < rounds; ++r) {
        if (held.size() < 8 && g() % 2 == 0) {
          std::size_t const bytes = std::size_t(16) << (g() % 6);
          auto *p = static_cast<unsigned char *>(pool.allocate(bytes, dc::device::host()));
          std::fill_n(p, bytes, static_cast<unsigned char>(t + 1));
          held.emplace_back(p, bytes);
        } else if (!held.empty()) {
          auto [p, bytes] = held.back();
          held.pop_back();
          for (std::size_t i = 0; i < bytes; ++i)
            bad[std::size_t(t)] += p[i] != static_cast<unsigned char>(t + 1);
          pool.deallocate(p, bytes, dc::device::host());
        }
      }
      for (auto [p, bytes] : held)
        pool.deallocate(p, bytes, dc::device::host());
    });
  for (auto &th : threads)
    th.join();
  for (int t = 0; t < n; ++t)
    CHECK(bad[std::size_t(t)] == 0);
  auto const st = pool.stats();
  CHECK(st.bytes_in_use == 0);
  CHECK(st.reuses > 0);
  CHECK(st.bytes_cached > 0);
}
