// Helpers of the second-order tests (test_higher_order.cpp, test_higher_order_ops.cpp,
// test_higher_order_bits.cpp): the plain tape's gradient, H v by central differences of it, and
// grad_and_hvp's value and gradient against the plain tape's.
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

// f's value and gradient on a tape over duals (grad_and_hvp) against the plain tape's (bit for
// bit, or with bits = false to rounding), and its H v against central differences of the plain
// gradient.
template <class F> void check_second_order(F const &f, T64 const &x, T64 const &v, bool bits) {
  auto const r = dc::grad_and_hvp(f, x, v);
  dc::tape tp;
  auto xv = tp.variable(x.clone());
  auto y = dc::detail::as_var(f(xv));
  tp.backward(y);
  auto const g = xv.grad().to_vector(), gd = r.grad.to_vector();
  if (bits) {
    CHECK(same_bits(r.value, y.item()));
    for (std::size_t i = 0; i < g.size(); ++i) {
      INFO("element " << i << ": " << g[i] << " vs " << gd[i]);
      CHECK(same_bits(g[i], gd[i]));
    }
  } else {
    tape_support::check_close({r.value}, {y.item()}, 1e-13);
    tape_support::check_close(gd, g, 1e-13);
  }
  tape_support::check_close(r.hvp.to_vector(), fd_hvp(f, x, v), 1e-6);
}

} // namespace higher_order_support
