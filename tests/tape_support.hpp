// tests/tape_support.hpp: helpers shared by the tape tests: random tensors, a generic scalar
// loss, central differences in double precision and gradient checks against them.
#pragma once

#include <dualcast/autodiff.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <utility>
#include <vector>

namespace dc = dualcast;
using dc::shape;
using T64 = dc::tensor<double>;
using V64 = dc::var<double>;

namespace tape_support {

inline T64 random_tensor(shape const &s, unsigned seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(std::size_t(s.size()));
  for (auto &x : v)
    x = u(g);
  return T64::from(s, v);
}

// The size of the "10^7 elements" cases: 10^7 in optimised builds; 10^6 under the sanitizers,
// whose -O0 builds run each element about 10-30x slower (CI's ASan stage would spend minutes
// there; its release stage runs the full size).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr dc::index_t large_size = 1000000;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr dc::index_t large_size = 1000000;
#else
inline constexpr dc::index_t large_size = 10000000;
#endif
#else
inline constexpr dc::index_t large_size = 10000000;
#endif

// The same for large inputs (10^7 elements), where std::mt19937 at -Og takes a good part of a
// second: a counter hashed by splitmix64, uniform in [lo, hi).
inline T64 fast_random_tensor(shape const &s, std::uint64_t seed, double lo = -1.0,
                              double hi = 1.0) {
  T64 t = T64::empty(s);
  double *d = t.mutable_data();
  for (dc::index_t i = 0; i < t.size(); ++i) {
    std::uint64_t z = (seed + std::uint64_t(i)) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    d[i] = lo + (hi - lo) * double(z >> 11) * 0x1.0p-53;
  }
  return t;
}

// A scalar from any output: sum(y * W) with W fixed (a generic seed for non-scalar outputs).
inline V64 weigh(V64 const &y) {
  if (y.size() == 1 && y.rank() == 0)
    return y;
  return dc::sum(y * random_tensor(y.dims(), 777u + unsigned(y.size())));
}

using fn = std::function<V64(std::vector<V64> const &)>;

// d weigh(f(xs)) / d xs[i][j] by central differences (h = 1e-6), on a tape without gradients.
inline double central_difference(fn const &f, std::vector<T64> const &xs, std::size_t i,
                                 dc::index_t j) {
  auto eval = [&](std::vector<T64> const &in) {
    dc::tape t2;
    std::vector<V64> v2;
    for (auto const &x : in)
      v2.push_back(t2.variable(x, false));
    return weigh(f(v2)).item();
  };
  std::vector<T64> plus, minus;
  for (auto const &x : xs)
    plus.push_back(x.clone()), minus.push_back(x.clone());
  const double h = 1e-6;
  plus[i].mutable_data()[j] += h;
  minus[i].mutable_data()[j] -= h;
  return (eval(plus) - eval(minus)) / (2 * h);
}

// Compares the tape's gradients of weigh(f(xs)) with central differences: at the elements
// `elems` of every input (all elements when empty; for large inputs, a few).
inline void check_gradients_at(fn const &f, std::vector<T64> const &xs,
                               std::vector<dc::index_t> const &elems, double tol = 1e-6) {
  dc::tape tp;
  std::vector<V64> vs;
  for (auto const &x : xs)
    vs.push_back(tp.variable(x.clone()));
  V64 loss = weigh(f(vs));
  tp.backward(loss);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    T64 g = vs[i].grad();
    REQUIRE(g.defined());
    REQUIRE(g.dims() == xs[i].dims());
    auto gv = g.to_vector();
    auto check = [&](dc::index_t j) {
      INFO("input " << i << " element " << j);
      CHECK(gv[std::size_t(j)] ==
            doctest::Approx(central_difference(f, xs, i, j)).epsilon(tol).scale(1.0));
    };
    if (elems.empty())
      for (dc::index_t j = 0; j < xs[i].size(); ++j)
        check(j);
    else
      for (dc::index_t j : elems)
        check(j);
  }
}
inline void check_gradients(fn const &f, std::vector<T64> const &xs, double tol = 1e-6) {
  check_gradients_at(f, xs, {}, tol);
}

// Whether two results are the same bits (1 thread against 2, say).
inline bool same_bits(std::vector<double> const &a, std::vector<double> const &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// The value and the gradient of sum(f(x) * w) on a tape with `threads` threads.
inline std::pair<std::vector<double>, std::vector<double>>
run_threads(int threads, T64 const &x, std::function<V64(V64 const &)> const &f) {
  dc::tape tp;
  tp.ex.threads = threads;
  auto v = tp.variable(x.clone());
  auto y = f(v);
  tp.backward(dc::sum(y * random_tensor(y.dims(), 5)));
  return {y.value().to_vector(), v.grad().to_vector()};
}

inline std::vector<double> grads_of(V64 const &v) { return v.grad().to_vector(); }

inline void check_close(std::vector<double> const &a, std::vector<double> const &b,
                        double tol = 1e-12) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    CHECK(a[i] == doctest::Approx(b[i]).epsilon(tol).scale(1.0));
}

} // namespace tape_support
