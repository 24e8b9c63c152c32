// Helpers of the second-order tests (test_higher_order.cpp, test_higher_order_ops.cpp): the plain
// tape's gradient, H v by central differences of it.
#pragma once

#include "tape_support.hpp"

#include <cstring>
#include <vector>

namespace higher_order_support {

// The plain tape's gradient of f at x.
template <class F> T64 plain_gradient(F const &f, T64 const &x) {
  dc::tape tp;
  auto v = tp.variable(x.clone());
  auto y = dc::detail::as_var(f(v));
  tp.backward(y);
  return v.grad();
}

// H v by central differences of the plain gradient: (g(x + h v) - g(x - h v)) / 2h.
template <class F> std::vector<double> fd_hvp(F const &f, T64 const &x, T64 const &v) {
  double const h = 1e-5;
  T64 xp = x.clone(), xm = x.clone();
  for (dc::index_t i = 0; i < x.size(); ++i) {
    xp.raw_data()[i] += h * v.data()[i];
    xm.raw_data()[i] -= h * v.data()[i];
  }
  auto gp = plain_gradient(f, xp).to_vector(), gm = plain_gradient(f, xm).to_vector();
  std::vector<double> r(gp.size());
  for (std::size_t i = 0; i < r.size(); ++i)
    r[i] = (gp[i] - gm[i]) / (2 * h);
  return r;
}

inline bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

} // namespace higher_order_support
