// Tests of the parallel primitives on the tape (issue 13, items 1 and 2): prod (the zero-count
// adjoint), reduce with a user operator, the scans cumsum / cumprod / cummax / cummin / scan with
// a user operator (inclusive and exclusive) and linear_recurrence -- gradients against central
// differences in double precision (zeros, ties, one element, non-power-of-two sizes, every axis
// of a rank-3 array, keepdims, strided inputs), values against naive references (also at 10^6
// and 10^7 elements, across the blocks of the blocked reductions, with gradients at a few
// elements), and 1 thread equal to 2 bit for bit.
#include <dualcast/autodiff.hpp>

#include <doctest/doctest.h>

#include "tape_support.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

using namespace tape_support;

namespace {

// Operators of our own (generic: called on doubles and on dual numbers).
struct times_op {
  template <class A> A operator()(A a, A b) const { return a * b; }
};
struct lse_op { // log(exp(a) + exp(b)): associative, commutative
  template <class A> A operator()(A a, A b) const { return dc::log(dc::exp(a) + dc::exp(b)); }
};
struct soft_max_op { // a smooth maximum: t log(exp(a / t) + exp(b / t)), t = 0.1
  template <class A> A operator()(A a, A b) const {
    return 0.1 * dc::log(dc::exp(a * 10.0) + dc::exp(b * 10.0));
  }
};
struct mobius_op { // a b + a + b = (1 + a)(1 + b) - 1: associative
  template <class A> A operator()(A a, A b) const { return a * b + a + b; }
};
struct first_op { // op(a, b) = a: associative, not commutative
  template <class A> A operator()(A a, A) const { return a; }
};
struct last_op { // op(a, b) = b
  template <class A> A operator()(A, A b) const { return b; }
};

T64 with_values(T64 t, std::vector<std::pair<dc::index_t, double>> const &set) {
  for (auto [i, v] : set)
    t.mutable_data()[i] = v;
  return t;
}

// y without its first element along `axis` where `exclusive` (there an exclusive max / min /
// log-sum-exp scan is infinite, and so would be the loss).
V64 past_first(V64 const &y, int axis, bool exclusive) {
  int const a = axis < 0 ? axis + y.rank() : axis;
  return exclusive ? dc::slice(y, a, 1, y.dims().ext[a]) : y;
}

} // namespace

// ---- prod --------------------------------------------------------------------------------------
TEST_CASE("prod: values and the zero-count adjoint with no, one and several zeros") {
  auto x = random_tensor({3, 5, 7}, 101, 0.5, 1.5);
  for (bool kd : {false, true})
    for (auto axes : std::vector<std::vector<int>>{{}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}})
      check_gradients([axes, kd](auto const &v) { return dc::prod(v[0], axes, kd); }, {x});
  // One zero in some groups, two and three in others (along the last axis).
  auto z = with_values(x, {{0, 0.0}, {8, 0.0}, {9, 0.0}, {14, 0.0}, {15, 0.0}, {16, 0.0}});
  check_gradients([](auto const &v) { return dc::prod(v[0], {2}); }, {z});
  check_gradients([](auto const &v) { return dc::prod(v[0], {0, 1}, true); }, {z});
  check_gradients([](auto const &v) { return dc::prod(v[0]); }, {with_values(x, {{3, 0.0}})});
  check_gradients([](auto const &v) { return dc::prod(v[0]); },
                  {with_values(x, {{3, 0.0}, {50, 0.0}})});

  // The exact adjoint: the product of the others at a single zero, 0 for two zeros.
  dc::tape tp;
  auto a = tp.variable(T64::from({2, 4}, {2, 0, 3, 4, 0, 5, 0, 1}));
  auto y = dc::prod(a, {1});
  CHECK(y.value().to_vector() == std::vector<double>{0, 0});
  tp.backward(dc::sum(y));
  CHECK(a.grad().to_vector() == std::vector<double>{0, 24, 0, 0, 0, 0, 0, 0});
  // With no zero: p / x_i.
  dc::tape t2;
  auto b = t2.variable(T64::from({4}, {2, -3, 0.5, 4}));
  auto yb = dc::prod(b);
  CHECK(yb.item() == -12.0);
  t2.backward(yb);
  check_close(b.grad().to_vector(), {-6, 4, -24, -3});
}

TEST_CASE("prod: one element, empty groups, strided inputs, lazy expressions, tensors") {
  check_gradients([](auto const &v) { return dc::prod(v[0]); }, {random_tensor({1}, 102)});
  check_gradients([](auto const &v) { return dc::prod(v[0]); },
                  {with_values(random_tensor({1}, 102), {{0, 0.0}})});
  auto x = random_tensor({4, 6}, 103, 0.5, 1.5);
  check_gradients([](auto const &v) { return dc::prod(dc::transpose(v[0]), {1}); }, {x});
  check_gradients([](auto const &v) { return dc::prod(dc::slice(v[0], 1, 1, 6, 2), {0}); }, {x});
  check_gradients([](auto const &v) { return dc::prod(v[0] * 2.0 + 1.0, {1}); }, {x});
  // Over no element: 1.
  dc::tape tp;
  auto e = tp.variable(T64::zeros({3, 0}));
  auto ye = dc::prod(e, {1});
  CHECK(ye.value().to_vector() == std::vector<double>{1, 1, 1});
  tp.backward(dc::sum(ye));
  CHECK(e.grad().size() == 0);
  // On tensors.
  auto t = T64::from({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(dc::prod(t, {1}).to_vector() == std::vector<double>{6, 120});
  CHECK(dc::prod(t, {0}, true).dims() == shape{1, 3});
  CHECK(dc::prod(t).item() == 720.0);
  CHECK(dc::prod(dc::tensor<float>::from({3}, {1.5F, 2.F, -1.F})).item() == -3.0F);
}

TEST_CASE("prod: groups longer than a block (4096) match a naive product -- gradients at zeros") {
  dc::index_t const n = 3 * 4096 + 123;
  auto x = random_tensor({2, n}, 104, 0.999, 1.001);
  auto xv = x.to_vector();
  auto y = dc::prod(x, {1}).to_vector();
  for (int g = 0; g < 2; ++g) {
    double p = 1;
    for (dc::index_t i = 0; i < n; ++i)
      p *= xv[std::size_t(g * n + i)];
    CHECK(y[std::size_t(g)] == doctest::Approx(p).epsilon(1e-12));
  }
  fn f = [](auto const &v) { return dc::prod(v[0], {1}); };
  check_gradients_at(f, {x}, {0, 4095, 4096, 5000, n - 1, n, 2 * n - 1});
  // A zero in the third block of group 0, two zeros (different blocks) in group 1.
  auto z = with_values(x, {{9000, 0.0}, {n + 10, 0.0}, {n + 8000, 0.0}});
  check_gradients_at(f, {z}, {0, 9000, 9001, n + 10, n + 8000, n + 3});
}

// ---- reduce with a user operator ---------------------------------------------------------------
TEST_CASE("reduce: a user operator -- a * b equals prod, log-sum-exp, a smooth max, a b + a + b") {
  auto x = random_tensor({3, 5, 7}, 111, 0.5, 1.5);
  for (bool kd : {false, true})
    for (auto axes : std::vector<std::vector<int>>{{}, {0}, {1}, {2}, {0, 2}}) {
      INFO("keepdims " << kd);
      check_gradients([=](auto const &v) { return dc::reduce(v[0], times_op{}, 1.0, axes, kd); },
                      {x});
      check_gradients(
          [=](auto const &v) { return dc::reduce(v[0], lse_op{}, -HUGE_VAL, axes, kd); }, {x});
      // Same values and gradients as prod.
      dc::tape tp;
      auto a = tp.variable(x.clone()), b = tp.variable(x.clone());
      auto ya = dc::reduce(a, times_op{}, 1.0, axes, kd), yb = dc::prod(b, axes, kd);
      check_close(ya.value().to_vector(), yb.value().to_vector());
      tp.backward(dc::sum(ya) + dc::sum(yb));
      check_close(a.grad().to_vector(), b.grad().to_vector());
    }
  check_gradients([](auto const &v) { return dc::reduce(v[0], soft_max_op{}, -HUGE_VAL, {1}); },
                  {x});
  check_gradients([](auto const &v) { return dc::reduce(v[0], mobius_op{}, 0.0, {2}); },
                  {random_tensor({3, 5, 7}, 112, -0.5, 0.5)});
  // The product by the general rule is right with zeros too (no division anywhere).
  auto z = with_values(x, {{0, 0.0}, {8, 0.0}, {9, 0.0}});
  check_gradients([](auto const &v) { return dc::reduce(v[0], times_op{}, 1.0, {2}); }, {z});
  // log-sum-exp agrees with dc::logsumexp.
  dc::tape tp;
  auto a = tp.variable(x.clone()), b = tp.variable(x.clone());
  auto ya = dc::reduce(a, lse_op{}, -HUGE_VAL, {1}), yb = dc::logsumexp(b, 1);
  check_close(ya.value().to_vector(), yb.value().to_vector(), 1e-13);
  tp.backward(dc::sum(ya) + dc::sum(yb));
  check_close(a.grad().to_vector(), b.grad().to_vector(), 1e-13);
}

TEST_CASE("reduce: order kept for non-commutative operators, one element, empty, strided") {
  auto x = random_tensor({4, 6}, 113);
  dc::tape tp;
  auto a = tp.variable(x.clone());
  auto first = dc::reduce(a, first_op{}, 0.0, {1}), last = dc::reduce(a, last_op{}, 0.0, {0});
  auto xv = x.to_vector();
  CHECK(first.value().to_vector() == std::vector<double>{xv[0], xv[6], xv[12], xv[18]});
  CHECK(last.value().to_vector() == std::vector<double>(xv.begin() + 18, xv.begin() + 24));
  tp.backward(dc::sum(first) + dc::sum(last));
  std::vector<double> want(24, 0.0);
  for (int r = 0; r < 4; ++r)
    want[std::size_t(r * 6)] += 1;
  for (int c = 0; c < 6; ++c)
    want[std::size_t(18 + c)] += 1;
  CHECK(a.grad().to_vector() == want);
  // Over axes {1, 0} of a transposed array: the order is the permuted array's.
  check_gradients(
      [](auto const &v) { return dc::reduce(dc::transpose(v[0]), lse_op{}, -HUGE_VAL, {0}); }, {x});
  check_gradients(
      [](auto const &v) {
        return dc::reduce(dc::slice(v[0], 1, 0, 6, 2), mobius_op{}, 0.0, {1}, true);
      },
      {random_tensor({4, 6}, 114, -0.5, 0.5)});
  check_gradients([](auto const &v) { return dc::reduce(v[0], lse_op{}, -HUGE_VAL); },
                  {random_tensor({1}, 115)});
  dc::tape t2;
  auto e = t2.variable(T64::zeros({2, 0}));
  auto ye = dc::reduce(e, lse_op{}, -HUGE_VAL, {1});
  CHECK(ye.value().to_vector() == std::vector<double>{-HUGE_VAL, -HUGE_VAL});
  t2.backward(dc::sum(ye * 0.0));
  // On tensors.
  CHECK(dc::reduce(T64::from({2, 2}, {1, 2, 3, 4}), times_op{}, 1.0, {0}).to_vector() ==
        std::vector<double>{3, 8});
}

TEST_CASE("reduce: groups longer than a block, against prod and central differences") {
  dc::index_t const n = 2 * 4096 + 777;
  auto x = random_tensor({2, n}, 116, 0.999, 1.001);
  x = with_values(x, {{n + 5000, 0.0}}); // a zero in group 1's second block
  dc::tape tp;
  auto a = tp.variable(x.clone()), b = tp.variable(x.clone());
  auto ya = dc::reduce(a, times_op{}, 1.0, {1}), yb = dc::prod(b, {1});
  check_close(ya.value().to_vector(), yb.value().to_vector(), 1e-12);
  tp.backward(dc::sum(ya * T64::from({2}, {0.5, 2.0})) + dc::sum(yb * T64::from({2}, {0.5, 2.0})));
  check_close(a.grad().to_vector(), b.grad().to_vector(), 1e-10);
  check_gradients_at([](auto const &v) { return dc::reduce(v[0], lse_op{}, -HUGE_VAL, {1}); },
                     {random_tensor({2, n}, 117)}, {0, 4095, 4096, 8191, 8192, n - 1, n + 4100});
  check_gradients_at([](auto const &v) { return dc::reduce(v[0], mobius_op{}, 0.0); },
                     {random_tensor({n}, 118, -1e-3, 1e-3)}, {0, 4096, 5000, n - 1});
}

// ---- scans -------------------------------------------------------------------------------------
TEST_CASE("scans: cumsum, cumprod, cummax, cummin, a user operator along every axis") {
  auto x = random_tensor({3, 5, 7}, 121, 0.5, 1.5); // distinct values: no ties
  for (int axis : {0, 1, 2, -1})
    for (bool ex : {false, true}) {
      INFO("axis " << axis << " exclusive " << ex);
      check_gradients([=](auto const &v) { return dc::cumsum(v[0], axis, ex); }, {x});
      check_gradients([=](auto const &v) { return dc::cumprod(v[0], axis, ex); }, {x});
      check_gradients(
          [=](auto const &v) { return past_first(dc::cummax(v[0], axis, ex), axis, ex); }, {x});
      check_gradients(
          [=](auto const &v) { return past_first(dc::cummin(v[0], axis, ex), axis, ex); }, {x});
      check_gradients(
          [=](auto const &v) {
            return past_first(dc::scan(v[0], lse_op{}, -HUGE_VAL, axis, ex), axis, ex);
          },
          {x});
      check_gradients([=](auto const &v) { return dc::scan(v[0], mobius_op{}, 0.0, axis, ex); },
                      {random_tensor({3, 5, 7}, 122, -0.5, 0.5)});
      // scan with a * b is cumprod, with a + b cumsum (values and gradients).
      dc::tape tp;
      auto a = tp.variable(x.clone()), b = tp.variable(x.clone());
      auto ya = dc::scan(a, times_op{}, 1.0, axis, ex), yb = dc::cumprod(b, axis, ex);
      check_close(ya.value().to_vector(), yb.value().to_vector());
      auto w = random_tensor(x.dims(), 123);
      tp.backward(dc::sum(ya * w) + dc::sum(yb * w));
      check_close(a.grad().to_vector(), b.grad().to_vector());
    }
}

TEST_CASE("scans: values against a naive reference -- exclusive starts at the neutral element") {
  auto x = T64::from({2, 4}, {1, -2, 3, 0.5, 2, 2, -1, 4});
  CHECK(dc::cumsum(x, 1).to_vector() == std::vector<double>{1, -1, 2, 2.5, 2, 4, 3, 7});
  CHECK(dc::cumsum(x, 1, true).to_vector() == std::vector<double>{0, 1, -1, 2, 0, 2, 4, 3});
  CHECK(dc::cumsum(x, 0).to_vector() == std::vector<double>{1, -2, 3, 0.5, 3, 0, 2, 4.5});
  CHECK(dc::cumprod(x, 1).to_vector() == std::vector<double>{1, -2, -6, -3, 2, 4, -4, -16});
  CHECK(dc::cumprod(x, 1, true).to_vector() == std::vector<double>{1, 1, -2, -6, 1, 2, 4, -4});
  CHECK(dc::cummax(x, 1).to_vector() == std::vector<double>{1, 1, 3, 3, 2, 2, 2, 4});
  CHECK(dc::cummin(x, 1).to_vector() == std::vector<double>{1, -2, -2, -2, 2, 2, -1, -1});
  double const inf = std::numeric_limits<double>::infinity();
  CHECK(dc::cummax(x, 1, true).to_vector() == std::vector<double>{-inf, 1, 1, 3, -inf, 2, 2, 2});
  CHECK(dc::cummin(x, 1, true).to_vector() == std::vector<double>{inf, 1, -2, -2, inf, 2, 2, -1});
  CHECK(dc::scan(x, last_op{}, 0.0, 1).to_vector() == x.to_vector());
  CHECK(dc::scan(x, first_op{}, 7.0, 1, true).to_vector() ==
        std::vector<double>{7, 1, 1, 1, 7, 2, 2, 2});
  // NaN propagates through cummax / cummin.
  auto nan = T64::from({4}, {1, std::nan(""), 3, 0});
  auto m = dc::cummax(nan).to_vector();
  CHECK(m[0] == 1);
  CHECK((std::isnan(m[1]) && std::isnan(m[2]) && std::isnan(m[3])));
}

TEST_CASE("scans: cumprod with zeros (no division), cummax / cummin ties to the first element") {
  auto x = random_tensor({2, 9}, 124, 0.5, 1.5);
  for (auto const &zs : std::vector<std::vector<std::pair<dc::index_t, double>>>{
           {{3, 0.0}}, {{0, 0.0}}, {{8, 0.0}}, {{2, 0.0}, {5, 0.0}, {9, 0.0}, {10, 0.0}}})
    for (bool ex : {false, true})
      check_gradients([ex](auto const &v) { return dc::cumprod(v[0], 1, ex); },
                      {with_values(x, zs)});
  // Exact: x = (2, 0, 3, 0, 5): y = (2, 0, 0, 0, 0); dy_i/dx_1 = 2 * 3 * ... over y_1..: with
  // ybar = 1: xbar_0 = 1, xbar_1 = 2 + 2*3 = 8, xbar_2 = 0 (x_1 = 0 before it), ...
  dc::tape tp;
  auto a = tp.variable(T64::from({5}, {2, 0, 3, 0, 5}));
  auto y = dc::cumprod(a);
  CHECK(y.value().to_vector() == std::vector<double>{2, 0, 0, 0, 0});
  tp.backward(dc::sum(y));
  CHECK(a.grad().to_vector() == std::vector<double>{1, 8, 0, 0, 0});

  // Ties: the gradient of y_i goes to the first element reaching the running extremum.
  dc::tape t2;
  auto b = t2.variable(T64::from({6}, {1, 3, 3, 2, 3, 5}));
  auto mx = dc::cummax(b);
  CHECK(mx.value().to_vector() == std::vector<double>{1, 3, 3, 3, 3, 5});
  t2.backward(dc::sum(mx * T64::from({6}, {1, 2, 4, 8, 16, 32})));
  CHECK(b.grad().to_vector() == std::vector<double>{1, 30, 0, 0, 0, 32});
  dc::tape t3;
  auto c = t3.variable(T64::from({6}, {4, 2, 2, 3, 2, 1}));
  auto mn = dc::cummin(c, 0, true); // exclusive: (inf, 4, 2, 2, 2, 2)
  t3.backward(dc::sum(mn * T64::from({6}, {1, 2, 4, 8, 16, 32})));
  CHECK(c.grad().to_vector() == std::vector<double>{2, 60, 0, 0, 0, 0});
}

TEST_CASE("scans: one element, strided and lazy inputs, empty axes, tensors") {
  auto one = random_tensor({1}, 125);
  for (bool ex : {false, true}) {
    if (ex) { // the exclusive max / min of one element: the neutral element, no gradient
      dc::tape tp;
      auto o = tp.variable(one.clone());
      auto y = dc::cummin(o, 0, true);
      CHECK(y.item() == HUGE_VAL);
      tp.backward(y);
      CHECK(o.grad().item() == 0.0);
    } else {
      check_gradients([](auto const &v) { return dc::cummin(v[0], 0); }, {one});
    }
    check_gradients([ex](auto const &v) { return dc::cumprod(v[0], 0, ex); }, {one});
    check_gradients([ex](auto const &v) { return dc::scan(v[0], mobius_op{}, 0.0, 0, ex); }, {one});
  }
  auto x = random_tensor({5, 6}, 126, 0.5, 1.5);
  check_gradients([](auto const &v) { return dc::cumsum(dc::transpose(v[0]), 1); }, {x});
  check_gradients([](auto const &v) { return dc::cumprod(dc::transpose(v[0]), 0, true); }, {x});
  check_gradients([](auto const &v) { return dc::cummax(dc::slice(v[0], 1, 1, 6, 2), 1); }, {x});
  check_gradients([](auto const &v) { return dc::scan(v[0] * 0.5, lse_op{}, -HUGE_VAL, 0); }, {x});
  dc::tape tp;
  auto e = tp.variable(T64::zeros({3, 0, 2}));
  auto ye = dc::cumprod(e, 1);
  CHECK(ye.dims() == shape{3, 0, 2});
  tp.backward(dc::sum(ye));
  CHECK(e.grad().size() == 0);
  CHECK_THROWS_AS(dc::cumsum(e, 3), dc::index_error);
}

TEST_CASE("scans: few long rows run in blocks of 4096, like one sequential row") {
  dc::index_t const n = 3 * 4096 + 101;
  auto x = random_tensor({n}, 127, 0.999, 1.001);
  // The same row sequentially: row 0 of 16 rows (16 rows or more are never split).
  std::vector<double> many = x.to_vector();
  many.resize(std::size_t(16 * n), 1.0);
  auto x16 = T64::from({16, n}, many);
  std::vector<std::function<V64(V64 const &, bool)>> ops = {
      [](V64 const &v, bool ex) { return dc::cumsum(v, -1, ex); },
      [](V64 const &v, bool ex) { return dc::cumprod(v, -1, ex); },
      [](V64 const &v, bool ex) { return dc::cummax(v, -1, ex); },
      [](V64 const &v, bool ex) { return dc::scan(v, lse_op{}, -HUGE_VAL, -1, ex); },
      [](V64 const &v, bool ex) { return dc::scan(v - 1.0, mobius_op{}, 0.0, -1, ex); },
  };
  auto w = random_tensor({n}, 128);
  auto w16 = T64::zeros({16, n});
  for (dc::index_t i = 0; i < n; ++i)
    w16.mutable_data()[i] = w.data()[i];
  for (std::size_t k = 0; k < ops.size(); ++k)
    for (bool ex : {false, true}) {
      INFO("operation " << k << " exclusive " << ex);
      dc::tape tp;
      auto a = tp.variable(x.clone()), b = tp.variable(x16.clone());
      auto ya = ops[k](a, ex), yb = ops[k](b, ex);
      auto wa = ex ? dc::slice(ya * w, 0, 1, n) : ya * w; // (no infinite first element)
      auto wb = ex ? dc::slice(yb * w16, 1, 1, n) : yb * w16;
      tp.backward(dc::sum(wa) + dc::sum(wb));
      auto va = ya.value().to_vector(), vb = yb.value().to_vector();
      auto ga = a.grad().to_vector(), gb = b.grad().to_vector();
      vb.resize(std::size_t(n));
      gb.resize(std::size_t(n));
      CHECK(va[0] == vb[0]); // (the neutral element of an exclusive scan: maybe infinite)
      va.erase(va.begin()), vb.erase(vb.begin());
      check_close(va, vb, 1e-11);
      check_close(ga, gb, 1e-11);
    }
  // Against central differences at block boundaries, with zeros in cumprod across blocks (the
  // loss sums 10^4 terms: central differences are good to about 1e-5 here, relative to the
  // gradient).
  std::vector<dc::index_t> const at = {0, 1, 4095, 4096, 4097, 8191, 8192, n - 2, n - 1};
  for (bool ex : {false, true}) {
    check_gradients_at([ex](auto const &v) { return dc::cumprod(v[0], 0, ex); },
                       {with_values(x, {{5000, 0.0}})}, at, 1e-4);
    check_gradients_at([ex](auto const &v) { return dc::cumprod(v[0], 0, ex); },
                       {with_values(x, {{100, 0.0}, {9000, 0.0}})}, at, 1e-4);
    check_gradients_at([ex](auto const &v) { return dc::cumsum(v[0], 0, ex); }, {x}, at, 1e-4);
  }
  // Along the first axis of a (n, 3) array (elements 3 apart).
  auto y = random_tensor({n, 3}, 129, 0.999, 1.001);
  check_gradients_at([](auto const &v) { return dc::cumprod(v[0], 0); }, {y},
                     {0, 2, 3 * 4096 + 1, 3 * 8192, 3 * n - 1}, 1e-4);
}

// The same bits, or NaN both (of any payload: vector and scalar code may take a NaN operand
// from either side).
template <class T> bool same_bits_or_nans(T p, T q) {
  using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  return (std::isnan(p) && std::isnan(q)) || std::bit_cast<U>(p) == std::bit_cast<U>(q);
}

// The CPU's backward walks groups of contiguous pieces in the lanes of a vector (vector_walks.hpp);
// along the first axis of an (n, 2) array the same pieces walk one per scalar register. Both are
// the sequential loop per piece: the same bits, in float and double, with ties, zeros and a NaN.
template <class T> void check_vector_walks() {
  using TT = dc::tensor<T>;
  dc::index_t const n =
      40 * 4096 + 123; // full groups of pieces, a short last piece, a partial group
  std::mt19937 gen(131);
  std::uniform_int_distribution<int> level(0, 6); // ties
  std::uniform_real_distribution<double> u(0.999, 1.001), w(-1, 1);
  TT x = TT::empty({n}), x2 = TT::empty({n, 2}), seed = TT::empty({n}), seed2 = TT::empty({n, 2});
  for (dc::index_t i = 0; i < n; ++i) {
    double const v = i % 3 ? u(gen) : 0.9 + 0.05 * level(gen);
    double const s = w(gen);
    x.mutable_data()[i] = x2.mutable_data()[2 * i] = x2.mutable_data()[2 * i + 1] = T(v);
    seed.mutable_data()[i] = seed2.mutable_data()[2 * i] = T(s);
    seed2.mutable_data()[2 * i + 1] = T(0.5 * s);
  }
  for (dc::index_t i : {dc::index_t(4096 * 7 + 5), dc::index_t(4096 * 21)}) // zeros
    x.mutable_data()[i] = x2.mutable_data()[2 * i] = x2.mutable_data()[2 * i + 1] = T(0);
  seed.mutable_data()[4096 * 9] = seed2.mutable_data()[2 * 4096 * 9] = T(0);
  std::vector<std::function<dc::var<T>(dc::var<T> const &, bool)>> ops = {
      [](dc::var<T> const &v, bool ex) { return dc::cumsum(v, 0, ex); },
      [](dc::var<T> const &v, bool ex) { return dc::cumprod(v, 0, ex); },
      [](dc::var<T> const &v, bool ex) { return dc::cummax(v, 0, ex); },
      [](dc::var<T> const &v, bool ex) { return dc::cummin(v, 0, ex); },
  };
  for (bool nan : {false, true}) {
    if (nan) // (a NaN wins the extrema from there on; the gradient follows it)
      x.mutable_data()[4096 * 30 + 7] = x2.mutable_data()[2 * (4096 * 30 + 7)] =
          x2.mutable_data()[2 * (4096 * 30 + 7) + 1] = std::numeric_limits<T>::quiet_NaN();
    for (std::size_t k = 0; k < ops.size(); ++k)
      for (bool ex : {false, true}) {
        INFO("operation " << k << " exclusive " << ex << " NaN " << nan << " bytes " << sizeof(T));
        dc::tape tp;
        auto a = tp.variable(x.clone()), b = tp.variable(x2.clone());
        tp.backward(std::vector<dc::var<T>>{ops[k](a, ex), ops[k](b, ex)},
                    std::vector<TT>{seed, seed2});
        auto ga = a.grad(), gb = b.grad();
        std::size_t differ = 0, nonzero = 0;
        for (dc::index_t i = 0; i < n; ++i) {
          differ += !same_bits_or_nans(ga.data()[i], gb.data()[2 * i]);
          nonzero += ga.data()[i] != 0;
        }
        CHECK(differ == 0);
        CHECK(nonzero > 0);
      }
  }
}
TEST_CASE("scans: the backward's vector walks give the bits of scalar walks (float, double)") {
  check_vector_walks<float>();
  check_vector_walks<double>();
}

// f(j, c, i, t) for each element (o, j, c) of a (2, n, C) array: i its index there, t the index of
// (o, c, j) in the transposed (2, C, n) array.
template <class F> void each_transposed(dc::index_t n, dc::index_t C, F &&f) {
  for (dc::index_t o = 0; o < 2; ++o)
    for (dc::index_t j = 0; j < n; ++j)
      for (dc::index_t c = 0; c < C; ++c)
        f(j, c, (o * n + j) * C + c, (o * C + c) * n + j);
}

// Along an outer axis neighbouring rows lie side by side and walk in the lanes of vectors, 8
// vectors per step where 8 vectors' worth of rows are side by side (scan.hpp: columns_group);
// the same scans along the last axis of the transposed array walk one row per scalar register.
// Shape (2, n, C) along axis 1: C = 200 leaves groups that cross from one outer index to the
// next, and a partial group at the end.
template <class T> void check_column_walks() {
  using TT = dc::tensor<T>;
  dc::index_t const n = 300, C = 200;
  std::mt19937 gen(137);
  std::uniform_int_distribution<int> level(0, 4);
  std::uniform_real_distribution<double> u(0.99, 1.01), w(-1, 1);
  TT x = TT::empty({2, n, C}), xt = TT::empty({2, C, n}), seed = TT::empty({2, n, C}),
     seedt = TT::empty({2, C, n});
  each_transposed(n, C, [&](dc::index_t, dc::index_t c, dc::index_t i, dc::index_t t) {
    T const v = T(c % 3 ? u(gen) : 0.98 + 0.01 * level(gen)), sv = T(w(gen));
    x.mutable_data()[i] = xt.mutable_data()[t] = v;
    seed.mutable_data()[i] = seedt.mutable_data()[t] = sv;
  });
  auto set = [&](dc::index_t o, dc::index_t j, dc::index_t c, T v) {
    x.mutable_data()[(o * n + j) * C + c] = xt.mutable_data()[(o * C + c) * n + j] = v;
  };
  set(0, 17, 5, T(0)), set(1, 200, 150, T(0)), set(1, 40, 199, std::numeric_limits<T>::quiet_NaN());
  std::vector<std::function<dc::var<T>(dc::var<T> const &, int, bool)>> ops = {
      [](dc::var<T> const &v, int ax, bool ex) { return dc::cumsum(v, ax, ex); },
      [](dc::var<T> const &v, int ax, bool ex) { return dc::cumprod(v, ax, ex); },
      [](dc::var<T> const &v, int ax, bool ex) { return dc::cummax(v, ax, ex); },
      [](dc::var<T> const &v, int ax, bool ex) { return dc::cummin(v, ax, ex); },
  };
  for (std::size_t k = 0; k < ops.size(); ++k)
    for (bool ex : {false, true}) {
      INFO("operation " << k << " exclusive " << ex << " bytes " << sizeof(T));
      dc::tape tp;
      auto a = tp.variable(x.clone()), b = tp.variable(xt.clone());
      auto ya = ops[k](a, 1, ex), yb = ops[k](b, 2, ex);
      tp.backward(std::vector<dc::var<T>>{ya, yb}, std::vector<TT>{seed, seedt});
      auto va = ya.value(), vb = yb.value(), ga = a.grad(), gb = b.grad();
      std::size_t differ = 0;
      each_transposed(n, C, [&](dc::index_t, dc::index_t, dc::index_t i, dc::index_t t) {
        differ += !same_bits_or_nans(va.data()[i], vb.data()[t]) +
                  !same_bits_or_nans(ga.data()[i], gb.data()[t]);
      });
      CHECK(differ == 0);
    }
}
TEST_CASE("scans: rows side by side walk in vector lanes, the bits of scalar walks") {
  check_column_walks<float>();
  check_column_walks<double>();
}

// linear_recurrence the same way, with h0: (2, n, C) along axis 1 against (2, C, n) along axis 2.
template <class T> void check_recurrence_column_walks() {
  using TT = dc::tensor<T>;
  dc::index_t const n = 300, C = 200;
  std::mt19937 gen(139);
  std::uniform_real_distribution<double> u(-1, 1);
  TT a = TT::empty({2, n, C}), at = TT::empty({2, C, n}), b = TT::empty({2, n, C}),
     bt = TT::empty({2, C, n}), seed = TT::empty({2, n, C}), seedt = TT::empty({2, C, n});
  each_transposed(n, C, [&](dc::index_t j, dc::index_t c, dc::index_t i, dc::index_t t) {
    a.mutable_data()[i] = at.mutable_data()[t] = T(j == 50 && c == 7 ? 0.0 : u(gen));
    b.mutable_data()[i] = bt.mutable_data()[t] = T(u(gen));
    seed.mutable_data()[i] = seedt.mutable_data()[t] = T(c == 9 ? 0.0 : u(gen));
  });
  TT h0 = TT::empty({2, C});
  for (dc::index_t i = 0; i < 2 * C; ++i)
    h0.mutable_data()[i] = T(u(gen));
  dc::tape tp;
  auto va = tp.variable(a.clone()), vat = tp.variable(at.clone()), vb = tp.variable(b.clone()),
       vbt = tp.variable(bt.clone()), vh = tp.variable(h0.clone()), vht = tp.variable(h0.clone());
  auto y = dc::linear_recurrence(va, vb, vh, 1), yt = dc::linear_recurrence(vat, vbt, vht, 2);
  tp.backward(std::vector<dc::var<T>>{y, yt}, std::vector<TT>{seed, seedt});
  std::size_t differ = 0;
  auto same = [](T p, T q) { return same_bits_or_nans(p, q); };
  auto yv = y.value(), ytv = yt.value(), ga = va.grad(), gat = vat.grad(), gb = vb.grad(),
       gbt = vbt.grad();
  each_transposed(n, C, [&](dc::index_t, dc::index_t, dc::index_t i, dc::index_t t) {
    differ += !same(yv.data()[i], ytv.data()[t]) + !same(ga.data()[i], gat.data()[t]) +
              !same(gb.data()[i], gbt.data()[t]);
  });
  auto gh = vh.grad(), ght = vht.grad();
  for (dc::index_t i = 0; i < 2 * C; ++i)
    differ += !same(gh.data()[i], ght.data()[i]);
  CHECK(differ == 0);
}
TEST_CASE("linear_recurrence: rows side by side walk in vector lanes, the bits of scalar walks") {
  check_recurrence_column_walks<float>();
  check_recurrence_column_walks<double>();
}

// ---- linear recurrence -------------------------------------------------------------------------
TEST_CASE("linear_recurrence: gradients for a, b and h0 along every axis, broadcasting") {
  auto a = random_tensor({3, 5, 4}, 131), b = random_tensor({3, 5, 4}, 132);
  check_gradients([](auto const &v) { return dc::linear_recurrence(v[0], v[1], 1); }, {a, b});
  check_gradients([](auto const &v) { return dc::linear_recurrence(v[0], v[1], v[2], 0); },
                  {a, b, random_tensor({5, 4}, 133)});
  check_gradients([](auto const &v) { return dc::linear_recurrence(v[0], v[1], v[2], 1); },
                  {a, b, random_tensor({3, 4}, 134)});
  check_gradients([](auto const &v) { return dc::linear_recurrence(v[0], v[1], v[2], -1); },
                  {a, b, random_tensor({3, 5}, 135)});
  // Broadcast: a decay per feature, h0 one number per feature.
  check_gradients([](auto const &v) { return dc::linear_recurrence(v[0], v[1], v[2], 1); },
                  {random_tensor({1, 1, 4}, 136), b, random_tensor({4}, 137)});
  // Zeros in a, one step, strided inputs.
  check_gradients([](auto const &v) { return dc::linear_recurrence(v[0], v[1], v[2], 1); },
                  {with_values(a, {{4, 0.0}, {8, 0.0}, {12, 0.0}}), b, random_tensor({3, 4}, 138)});
  check_gradients(
      [](auto const &v) { return dc::linear_recurrence(v[0], v[1], v[2], 0); },
      {random_tensor({1, 3}, 139), random_tensor({1, 3}, 140), random_tensor({3}, 141)});
  check_gradients(
      [](auto const &v) {
        return dc::linear_recurrence(dc::transpose(v[0]), dc::slice(v[1], 0, 0, 8, 2), 0);
      },
      {random_tensor({3, 4}, 142), random_tensor({8, 3}, 143)});
  CHECK_THROWS_AS(dc::linear_recurrence(a, b, random_tensor({5, 3}, 1), 0), dc::shape_error);
}

TEST_CASE("linear_recurrence: values against a naive loop and the scans it generalises") {
  auto a = random_tensor({4, 7}, 144), b = random_tensor({4, 7}, 145), h0 = random_tensor({4}, 146);
  auto h = dc::linear_recurrence(a, b, h0, 1).to_vector();
  auto av = a.to_vector(), bv = b.to_vector(), hv = h0.to_vector();
  for (int r = 0; r < 4; ++r) {
    double s = hv[std::size_t(r)];
    for (int t = 0; t < 7; ++t) {
      s = av[std::size_t(r * 7 + t)] * s + bv[std::size_t(r * 7 + t)];
      CHECK(h[std::size_t(r * 7 + t)] == s);
    }
  }
  // a = 1: cumsum of b; b = 0, h0 = 1: cumprod of a.
  auto ones = T64::full({4, 7}, 1.0);
  check_close(dc::linear_recurrence(ones, b, 1).to_vector(), dc::cumsum(b, 1).to_vector());
  check_close(dc::linear_recurrence(a, T64::zeros({4, 7}), T64::full({4}, 1.0), 1).to_vector(),
              dc::cumprod(a, 1).to_vector());
}

TEST_CASE("linear_recurrence: few long rows run in pieces of 4096, like one sequential row") {
  dc::index_t const n = 3 * 4096 + 101;
  // |a| <= 1 (h stays bounded over 10^4 steps), one a = 0 in a later piece (the carry past it
  // is exactly b there).
  auto a = with_values(random_tensor({2, n}, 181, 0.99, 1.0), {{5000, 0.0}});
  auto b = random_tensor({2, n}, 182), h0 = random_tensor({2}, 183), w = random_tensor({2, n}, 184);
  // The same rows unsplit: rows 0 and 1 of 16 (16 rows or more are never split).
  auto pad = [&](T64 const &t, double fill) {
    std::vector<double> v = t.to_vector();
    v.resize(std::size_t(16 * (t.rank() == 2 ? n : 1)), fill);
    return T64::from(t.rank() == 2 ? dc::shape{16, n} : dc::shape{16}, v);
  };
  dc::tape tp;
  auto va = tp.variable(a.clone()), vb = tp.variable(b.clone()), vh = tp.variable(h0.clone());
  auto wa = tp.variable(pad(a, 1.0)), wb = tp.variable(pad(b, 0.0)), wh = tp.variable(pad(h0, 0.0));
  auto ya = dc::linear_recurrence(va, vb, vh, 1), yb = dc::linear_recurrence(wa, wb, wh, 1);
  tp.backward(dc::sum(ya * w) + dc::sum(yb * pad(w, 0.0)));
  auto first = [](T64 const &t, dc::index_t k) {
    auto v = t.to_vector();
    v.resize(std::size_t(k));
    return v;
  };
  check_close(ya.value().to_vector(), first(yb.value(), 2 * n), 1e-11);
  check_close(va.grad().to_vector(), first(wa.grad(), 2 * n), 1e-11);
  check_close(vb.grad().to_vector(), first(wb.grad(), 2 * n), 1e-11);
  check_close(vh.grad().to_vector(), first(wh.grad(), 2), 1e-11);
  // Against central differences at piece boundaries of both rows, and for h0.
  std::vector<dc::index_t> const at = {0,    4095,  4096, 4097,     5000,
                                       8192, n - 1, n,    n + 4096, 2 * n - 1};
  // (the inputs not differentiated: constants on the same tape)
  check_gradients_at(
      [h0](auto const &v) {
        return dc::linear_recurrence(v[0], v[1], v[0].owner()->constant(h0), 1);
      },
      {a, b}, at, 1e-4);
  check_gradients_at(
      [a, b](auto const &v) {
        auto &tp = *v[0].owner();
        return dc::linear_recurrence(tp.constant(a), tp.constant(b), v[0], 1);
      },
      {h0}, {0, 1}, 1e-4);
}

// ---- max / min over few long groups
// --------------------------------------------------------------
TEST_CASE(
    "max / min: few long groups run in chunks -- the first extremum, as one sequential scan") {
  dc::index_t const n = 5 * 8192 + 77; // >= 4 * 8192 elements in fewer than 1024 groups: cut
  double const nan = std::numeric_limits<double>::quiet_NaN();
  // Group 0: the maximum and the minimum twice each, in different chunks (the first wins).
  // Group 1: a NaN first (it wins, as in a sequential scan). Group 2: a NaN later (it never
  // wins), the maximum last, the minimum at a chunk boundary.
  auto x = with_values(random_tensor({3, n}, 191), {{100, 5.0},
                                                    {30000, 5.0},
                                                    {20000, -5.0},
                                                    {40000, -5.0},
                                                    {n, nan},
                                                    {2 * n + 10000, nan},
                                                    {3 * n - 1, 7.0},
                                                    {2 * n + 8192, -7.0}});
  auto const xv = x.to_vector();
  auto w = random_tensor({3}, 192);
  for (bool is_max : {true, false})
    for (bool whole : {false, true}) {
      INFO("max " << is_max << " whole array " << whole);
      dc::index_t const groups = whole ? 1 : 3, len = whole ? 3 * n : n;
      dc::tape tp;
      auto v = tp.variable(x.clone());
      auto y =
          whole ? (is_max ? dc::max(v) : dc::min(v)) : (is_max ? dc::max(v, {1}) : dc::min(v, {1}));
      tp.backward(whole ? y : dc::sum(y * w));
      auto yv = y.value().to_vector(), g = v.grad().to_vector();
      for (dc::index_t i = 0; i < groups; ++i) {
        dc::index_t best = 0; // the sequential scan
        for (dc::index_t j = 1; j < len; ++j) {
          double const c = xv[std::size_t(i * len + j)], e = xv[std::size_t(i * len + best)];
          if (is_max ? c > e : c < e)
            best = j;
        }
        double const want = xv[std::size_t(i * len + best)];
        CHECK((std::isnan(want) ? std::isnan(yv[std::size_t(i)]) : yv[std::size_t(i)] == want));
        double const seed = whole ? 1.0 : w.data()[i];
        for (dc::index_t j = 0; j < len; ++j)
          if (g[std::size_t(i * len + j)] != (j == best ? seed : 0.0)) {
            FAIL_CHECK("group " << i << ": gradient at " << j << ", the extremum at " << best);
            break;
          }
      }
    }
}

// ---- threads and large inputs ------------------------------------------------------------------
TEST_CASE("primitives: 1 thread and 2 threads give the same bits") {
  auto x = random_tensor({64, 1500}, 151, 0.99, 1.01);
  std::vector<std::function<V64(V64 const &)>> ops = {
      [](V64 const &v) { return dc::prod(v, {1}); },
      [](V64 const &v) { return dc::prod(v); },
      [](V64 const &v) { return dc::reduce(v, lse_op{}, -HUGE_VAL, {0}); },
      [](V64 const &v) { return dc::reduce(v, times_op{}, 1.0); },
      [](V64 const &v) { return dc::cumsum(v, 1); },
      [](V64 const &v) { return dc::cumprod(v, 0, true); },
      [](V64 const &v) { return dc::cummax(v, 1); },
      [](V64 const &v) { return dc::scan(v, lse_op{}, -HUGE_VAL, 1); },
      [](V64 const &v) { return dc::linear_recurrence(v, v * 0.5, 1); },
      [](V64 const &v) { return dc::cumprod(dc::reshape(v, {64 * 1500}), 0, true); },
      [](V64 const &v) { return dc::scan(dc::reshape(v, {64 * 1500}), lse_op{}, -HUGE_VAL); },
  };
  for (std::size_t k = 0; k < ops.size(); ++k) {
    INFO("operation " << k);
    auto [y1, g1] = run_threads(1, x, ops[k]);
    auto [y2, g2] = run_threads(2, x, ops[k]);
    CHECK(same_bits(y1, y2));
    CHECK(same_bits(g1, g2));
  }
}

TEST_CASE("primitives: 10^6 elements against naive references") {
  dc::index_t const n = 1000000;
  auto x = random_tensor({n}, 161, 0.9999, 1.0001);
  auto xv = x.to_vector();
  dc::tape tp;
  auto v = tp.variable(x.clone());
  auto p = dc::prod(v), r = dc::reduce(v, lse_op{}, -HUGE_VAL);
  auto cs = dc::cumsum(v), cp = dc::cumprod(v), cm = dc::cummax(v);
  auto lr = dc::linear_recurrence(v * 0.5, v, 0);
  double np = 1, ns = 0, mx = -HUGE_VAL, h = 0;
  double lse_ref = 0, x0 = xv[0];
  for (double e : xv)
    lse_ref += std::exp(e - x0);
  lse_ref = x0 + std::log(lse_ref);
  auto csv = cs.value().to_vector(), cpv = cp.value().to_vector(), cmv = cm.value().to_vector(),
       lrv = lr.value().to_vector();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < xv.size(); ++i) {
    np *= xv[i];
    ns += xv[i];
    mx = std::max(mx, xv[i]);
    h = 0.5 * xv[i] * h + xv[i];
    // (blocks of 4096 combine in another order than this loop: the same up to rounding)
    bad += std::abs(csv[i] - ns) > 1e-12 * ns || std::abs(cpv[i] - np) > 1e-12 * np ||
           cmv[i] != mx ||
           std::abs(lrv[i] - h) > 1e-12 * std::abs(h); // (a * h + b: contracted to an fma or not)
  }
  CHECK(bad == 0);
  CHECK(p.item() == doctest::Approx(np).epsilon(1e-10));
  CHECK(r.item() == doctest::Approx(lse_ref).epsilon(1e-10));
  // Gradients: d prod / d x_i = prod / x_i; d lse / d x_i = softmax; cumsum's is the reverse
  // cumulative sum of ones, n - i.
  tp.backward(p + r + dc::sum(cs) * 1e-6);
  auto g = v.grad().to_vector();
  std::size_t gbad = 0;
  for (std::size_t i = 0; i < xv.size(); ++i) {
    double want = np / xv[i] + std::exp(xv[i] - lse_ref) + 1e-6 * double(n - dc::index_t(i));
    gbad += std::abs(g[i] - want) > 1e-9 * std::abs(want);
  }
  CHECK(gbad == 0);
}

TEST_CASE("primitives: 10^7 elements -- reduce and scan values against naive loops, gradients") {
  dc::index_t const n = large_size; // 10^7 (10^6 under the sanitizers)
  // Near 1 (products stay near 1), with one clear maximum and minimum; w the scans' cotangent:
  // nonzero at a few places only, so that the loss stays small and its central differences
  // exact to about 1e-9.
  auto x = fast_random_tensor({n}, 171, 0.9999, 1.0001);
  dc::index_t const at_max = n / 8 + 17, at_min = 3 * n / 4 + 21;
  x.mutable_data()[at_max] = 1.01;
  x.mutable_data()[at_min] = 0.99;
  auto w = T64::zeros({n});
  for (dc::index_t i : {dc::index_t(3), at_max + 1, at_min + 5, n - 2, n - 1})
    w.mutable_data()[i] = 1e-3 * double(i % 7 + 1);
  auto const xv = x.to_vector();
  // Values against naive sequential loops (the blocked reductions add in another order: equal up
  // to rounding; the extrema exactly).
  double s = 0, pr = 1, mn = HUGE_VAL;
  std::size_t bad = 0;
  auto cs = dc::cumsum(x).to_vector(), cp = dc::cumprod(x).to_vector(),
       cm = dc::cummin(x).to_vector();
  for (std::size_t i = 0; i < xv.size(); ++i) {
    s += xv[i], pr *= xv[i], mn = std::min(mn, xv[i]);
    bad += std::abs(cs[i] - s) > 1e-12 * s || std::abs(cp[i] - pr) > 1e-10 * pr || cm[i] != mn;
  }
  CHECK(bad == 0);
  dc::tape tp; // (sum, max and min are tape operations only)
  auto xc = tp.constant(x);
  CHECK(dc::sum(xc).item() == doctest::Approx(s).epsilon(1e-12));
  CHECK(dc::prod(x).item() == doctest::Approx(pr).epsilon(1e-10));
  CHECK(dc::max(xc).item() == 1.01);
  CHECK(dc::min(xc).item() == 0.99);
  // Gradients at two elements against central differences (each evaluation is a pass of every
  // operation over 10^7 elements): the maximum and the minimum (cummin's last record; w's
  // nonzeros after it reach it through every scan's adjoint).
  check_gradients_at(
      [w](auto const &v) {
        auto const &a = v[0];
        return dc::sum(a - 1.0) + dc::max(a) + dc::min(a) + dc::prod(a) +
               dc::sum((dc::cumsum(a - 1.0) + dc::cummin(a) + dc::cumprod(a)) * w);
      },
      {x}, {at_max, at_min});
}
