// Second-order tests of the linear operations a tape over duals runs part by part (scans, indexing,
// scatters, histograms: docs/higher-order.md): each loss puts the operation between nonlinear
// fused nodes, so that H v depends on its forward (the tangents) and on its backward (the adjoint
// of dual cotangents). H v against central differences of the plain tape's gradient in double on
// random inputs; values and gradients against the plain tape's bit for bit (the values run the
// plain tape's code on each part). test_higher_order.cpp holds the rest (kept apart: that file is
// the larger compile).
#include "higher_order_support.hpp"

#include <dualcast/autodiff.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace {

using tape_support::random_tensor;
using namespace higher_order_support;

// f's value and gradient by grad_and_hvp against the plain tape's, bit for bit; its H v against
// central differences of the plain gradient, (g(x + h v) - g(x - h v)) / 2h.
template <class F> void check_second_order(F const &f, T64 const &x, T64 const &v) {
  auto const r = dc::grad_and_hvp(f, x, v);
  dc::tape tp;
  auto xv = tp.variable(x.clone());
  auto y = dc::detail::as_var(f(xv));
  tp.backward(y);
  CHECK(same_bits(r.value, y.item()));
  auto const g = xv.grad().to_vector(), gd = r.grad.to_vector();
  REQUIRE(g.size() == gd.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("gradient element " << i << ": " << g[i] << " vs " << gd[i]);
    CHECK(same_bits(g[i], gd[i]));
  }
  auto const want = fd_hvp(f, x, v);
  auto const hv = r.hvp.to_vector();
  REQUIRE(hv.size() == want.size());
  double norm = 0;
  for (std::size_t i = 0; i < hv.size(); ++i) {
    norm += want[i] * want[i];
    INFO("H v element " << i);
    CHECK(hv[i] == doctest::Approx(want[i]).epsilon(1e-6).scale(1.0));
  }
  CHECK(norm > 1e-6); // (a loss whose H v vanishes would test nothing)
}

} // namespace

TEST_CASE("hvp through scans: cumsum inclusive and exclusive, along either axis") {
  T64 x = random_tensor({3, 5}, 31), v = random_tensor({3, 5}, 32);
  check_second_order(
      [](auto const &xv) {
        auto a = dc::cumsum(dc::tanh(xv), 1);
        auto b = dc::cumsum(xv * xv, 0, true);
        return dc::sum(dc::sin(a) * b);
      },
      x, v);
}

TEST_CASE("hvp through selections: cummax, cummin (inclusive, exclusive), max, min (axes, all)") {
  T64 x = random_tensor({4, 5}, 40), v = random_tensor({4, 5}, 41);
  check_second_order(
      [](auto const &xv) {
        auto t = dc::sin(xv * 3.0);
        auto a = dc::cummax(t, 1);
        auto b = dc::cummin(xv * t, 0, true); // its first row: +inf, kept out of the sum below
        auto c = dc::max(t * xv, {1});
        auto d = dc::min(dc::exp(t), {0}, true);
        return dc::sum(a * a * xv) + dc::sum(dc::tanh(dc::slice(b, 0, 1, 4))) + dc::sum(c * c) +
               dc::sum(d * t) + dc::max(xv * xv) + dc::norm(xv) + dc::sum(dc::norm(t, 3, {1})) +
               dc::norm(xv, 1) * dc::norm(t, -HUGE_VAL) + dc::sum(dc::norm(xv, HUGE_VAL, {0}));
      },
      x, v);
}

TEST_CASE(
    "hvp through conv2d: input, weights and bias all depending on x (direct, im2col + gemm)") {
  T64 x = random_tensor({2, 2, 4, 4}, 42), v = random_tensor({2, 2, 4, 4}, 43);
  for (auto alg : {dc::conv2d_algorithm::direct, dc::conv2d_algorithm::im2col_gemm}) {
    CAPTURE(int(alg));
    check_second_order(
        [alg](auto const &xv) {
          auto flat = dc::reshape(xv, {64});
          auto w = dc::reshape(dc::slice(dc::tanh(flat), 0, 0, 36), {2, 2, 3, 3});
          auto b = dc::slice(flat, 0, 40, 42);
          auto y = dc::conv2d(xv, w, b, {.stride = 1, .padding = 1, .algorithm = alg});
          auto z = dc::conv2d(dc::sin(xv), w, {.stride = 2, .padding = 0, .algorithm = alg});
          return dc::sum(dc::tanh(y)) + dc::sum(y * y) * 0.1 + dc::sum(z * z * z);
        },
        x, v);
  }
}

TEST_CASE("hvp through matmul: a constant on either side (its tangent's gemm skipped), both live") {
  T64 x = random_tensor({3, 4}, 44), v = random_tensor({3, 4}, 45);
  T64 const c = random_tensor({4, 3}, 46), d = random_tensor({2, 2, 3}, 47),
            e2 = random_tensor({3, 2}, 48);
  check_second_order(
      [&](auto const &xv) {
        auto t = dc::tanh(xv);
        auto a = dc::matmul(dc::constant_like(xv, c), t); // constant @ variable
        auto b = dc::matmul(t, dc::constant_like(xv, c)); // variable @ constant
        auto e = dc::matmul(t, dc::transpose(xv));        // both live
        auto f = dc::matmul(dc::constant_like(xv, d), dc::slice(xv, 0, 0, 3)); // batched, broadcast
        auto g = dc::matmul(dc::constant_like(xv, c),
                            dc::constant_like(xv, e2)); // neither: zero tangents
        return dc::sum(a * a) + dc::sum(dc::sin(b)) + dc::sum(e * e * e) + dc::sum(f * f) +
               dc::sum(g) * 0.5;
      },
      x, v);
}

TEST_CASE("argmax / argmin on duals: the positions of the values") {
  using D = dc::dual<double, 1>;
  dc::tape tp;
  auto mk = [](double val, double d) {
    D r(val);
    r.d[0] = d;
    return r;
  };
  // (the partials would pick other positions)
  auto x = tp.variable(
      dc::tensor<D>::from({2, 3}, {mk(1, 9), mk(3, 0), mk(2, 5), mk(-1, 0), mk(-4, 1), mk(0, -7)}));
  CHECK(dc::argmax(x).values == std::vector<dc::index_t>{1});
  CHECK(dc::argmin(x, 1).values == std::vector<dc::index_t>{0, 1});
  CHECK(dc::argmax(x.value(), 0).values == std::vector<dc::index_t>{0, 0, 0});
}

TEST_CASE("hvp through indexing: index_select, gather, flip, masked_select") {
  T64 x = random_tensor({4, 3}, 33), v = random_tensor({4, 3}, 34);
  T64 const mask = T64::from({4, 3}, {1, 0, 1, 0, 1, 1, 0, 0, 1, 1, 1, 0});
  dc::index_array const idx{{2, 3}, {0, 2, 1, 3, 3, 0}}; // gather along axis 0
  check_second_order(
      [&](auto const &xv) {
        auto t = dc::tanh(xv);
        auto a = dc::index_select(t, 0, {3, 0, 0, -2}); // duplicates, a negative index
        auto b = dc::gather(xv * t, 0, idx);
        auto c = dc::flip(t, {0, 1});
        auto d = dc::masked_select(xv, mask);
        return dc::sum(a * a) + dc::sum(dc::exp(b)) + dc::sum(c * xv) + dc::sum(d * d * d);
      },
      x, v);
}

TEST_CASE("hvp through scatters: index_add, scatter_add, scatter (duplicates), into constants") {
  T64 x = random_tensor({3, 4}, 35), v = random_tensor({3, 4}, 36);
  T64 const base = random_tensor({3, 4}, 37);
  dc::index_array const idx{{2, 4}, {0, 2, 2, 1, 0, 0, 1, 1}}; // duplicates along axis 0
  check_second_order(
      [&](auto const &xv) {
        auto t = dc::tanh(xv);
        auto a =
            dc::index_add(dc::constant_like(xv, base), 0, {2, 0, 2}, t * xv); // into a constant
        auto s = dc::slice(t, 0, 0, 2);
        auto b = dc::scatter_add(xv, 0, idx, s * s);
        auto c = dc::scatter(t, 0, idx, dc::slice(xv, 0, 1, 3) * 2.0); // the last duplicate
        return dc::sum(dc::sin(a)) + dc::sum(b * b) + dc::sum(dc::exp(c));
      },
      x, v);
}

TEST_CASE("hvp through a histogram: reduce_by_index with plus -- the others refused") {
  T64 x = random_tensor({5, 2}, 38), v = random_tensor({5, 2}, 39);
  check_second_order(
      [](auto const &xv) {
        auto h = dc::reduce_by_index(dc::tanh(xv), {2, 0, 2, 7, 1}, 3, dc::bin_op::plus);
        return dc::sum(h * h * h) + dc::sum(dc::exp(h));
      },
      x, v);
  using D = dc::dual<double, 1>;
  dc::tape tp;
  auto d = tp.variable(dc::tensor<D>::full({3}, D(1.0)));
  CHECK_THROWS_WITH_AS(dc::reduce_by_index(d, {0, 1, 0}, 2, dc::bin_op::max),
                       doctest::Contains("only bin_op::plus"), dc::tape_error);
}

TEST_CASE("fused nodes on duals: contiguous, strided and broadcast arguments, ranks 0 and 3") {
  // The node's passes take their arrays from one scratch block and skip the aliasing check (the
  // arrays are fresh); contiguous arguments of the call's shape run on pointers, others through
  // the launch plan. Each kind here, with one variable passed twice.
  T64 x = random_tensor({2, 3, 3}, 40), v = random_tensor({2, 3, 3}, 41);
  T64 const b = random_tensor({3}, 42);
  check_second_order(
      [&](auto const &xv) {
        auto a = dc::detail::as_var(dc::tanh(xv) * xv);                           // contiguous
        auto p = dc::detail::as_var(dc::sin(dc::permute(a, {0, 2, 1})) * a);      // strided
        auto q = dc::detail::as_var(dc::exp(p * dc::constant_like(xv, b) * 0.5)); // broadcast
        auto s = dc::detail::as_var(dc::sum(q));                                  // rank 0
        return dc::cos(s) * s + dc::sum(p * q);
      },
      x, v);
}

TEST_CASE(
    "fused nodes on duals: gradients written in place, overlapping slices through temporaries") {
  // Backward writes each variable's gradient in place, part by part: overwritten where fresh,
  // added to where it already holds sums (x and its slices feed several nodes), a strided slice's
  // gradient into its base's (every other column); a gradient whose memory meets an earlier
  // one's in the same node (overlapping slices l and r of x) goes through a temporary.
  T64 x = random_tensor({4, 6}, 43), v = random_tensor({4, 6}, 44);
  check_second_order(
      [&](auto const &xv) {
        auto l = dc::slice(xv, 1, 0, 4), r = dc::slice(xv, 1, 2, 6);       // overlapping
        auto e = dc::slice(xv, 1, 0, 6, 2), o = dc::slice(xv, 1, 1, 6, 2); // strided, disjoint
        auto a = dc::detail::as_var(dc::tanh(l) * r + dc::sin(r) * l);
        auto b = dc::detail::as_var(dc::exp(e * 0.3) * dc::cos(o) + e * o);
        auto c = dc::detail::as_var(dc::tanh(xv) * xv);
        return dc::sum(a * a) + dc::sum(b * b) * 0.5 + dc::sum(c * dc::sin(c));
      },
      x, v);
}
