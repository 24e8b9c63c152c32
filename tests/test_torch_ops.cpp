// Tests of the operations a PyTorch user reaches for (issue 14, item 6): elementwise where /
// minimum / maximum / clamp / atan2 / hypot / floor / ceil / round on tape variables (lazy, fused),
// argmax / argmin, variance / stddev, norm, squeeze / unsqueeze, split, repeat, flip, negative axes
// and indices, matmul with 1-D operands and broadcast batch dimensions, scatter / index_add,
// masked_select, and the softmax family over several axes. Gradients against central
// differences in double precision on random inputs, values against naive references, errors
// for bad arguments.
#include <dualcast/autodiff.hpp>

#include <doctest/doctest.h>

#include "tape_support.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

using namespace tape_support;

namespace {

// The values of e (a variable or a lazy expression).
template <class E> std::vector<double> values(E const &e) { return V64(e).value().to_vector(); }

// A mask tensor of 0 / 1 values (random, seeded).
T64 random_mask(shape const &s, unsigned seed) {
  auto v = random_tensor(s, seed).to_vector();
  for (auto &x : v)
    x = x > 0 ? 1.0 : 0.0;
  return T64::from(s, v);
}

} // namespace

// ---- elementwise ------------------------------------------------------------------------------
TEST_CASE("torch ops: atan2, hypot, maximum, minimum: values, gradients, broadcasting") {
  auto x = random_tensor({3, 4}, 1), y = random_tensor({3, 4}, 2), r = random_tensor({4}, 3);
  check_gradients([](auto const &v) { return dc::atan2(v[0], v[1]); }, {x, y});
  check_gradients([](auto const &v) { return dc::hypot(v[0], v[1]); }, {x, r});
  check_gradients([](auto const &v) { return dc::maximum(v[0], v[1]); }, {x, r});
  check_gradients([](auto const &v) { return dc::minimum(v[0], v[1]); }, {x, y});
  // with a scalar and a constant tensor, inside one expression
  check_gradients(
      [&](auto const &v) {
        return dc::maximum(v[0], 0.25) * dc::minimum(y, v[0]) + dc::atan2(0.5, v[0]);
      },
      {x});

  dc::tape tp;
  auto a = tp.variable(x), b = tp.variable(y);
  auto xs = x.to_vector(), ys = y.to_vector();
  auto at = values(dc::atan2(a, b)), hy = values(dc::hypot(a, b));
  auto mx = values(dc::maximum(a, b)), mn = values(dc::minimum(a, b));
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CHECK(at[i] == doctest::Approx(std::atan2(xs[i], ys[i])));
    CHECK(hy[i] == doctest::Approx(std::hypot(xs[i], ys[i])));
    CHECK(mx[i] == std::max(xs[i], ys[i]));
    CHECK(mn[i] == std::min(xs[i], ys[i]));
  }
  // One fused node for a chain of them.
  std::size_t before = tp.node_count();
  V64 chain = dc::maximum(dc::hypot(a, b), dc::atan2(a, b)) * 2.0;
  CHECK(tp.node_count() == before + 1);
  CHECK(chain.value().dims() == x.dims());
  CHECK_THROWS_AS(dc::maximum(a, tp.variable(random_tensor({5}, 4))), dc::shape_error);
}

TEST_CASE("torch ops: maximum / minimum ties split the gradient half and half -- NaN propagates") {
  dc::tape tp;
  auto a = tp.variable(T64::from({3}, {1.0, 2.0, 3.0}));
  auto b = tp.variable(T64::from({3}, {1.0, 5.0, 0.0}));
  tp.backward(dc::sum(dc::maximum(a, b) + dc::minimum(a, b) * 10.0));
  // tie at element 0: 0.5 (max) + 5 (min) each; elsewhere max's 1 and min's 10 go to one side
  CHECK(grads_of(a) == std::vector<double>{5.5, 10.0, 1.0});
  CHECK(grads_of(b) == std::vector<double>{5.5, 1.0, 10.0});
  dc::tape t2;
  auto n = t2.variable(T64::from({2}, {std::nan(""), 1.0}));
  auto m = values(dc::maximum(n, 0.0));
  CHECK(std::isnan(m[0]));
  CHECK(m[1] == 1.0);
}

TEST_CASE("torch ops: clamp with scalar, tensor and variable bounds") {
  auto x = random_tensor({4, 5}, 5, -2, 2);
  check_gradients([](auto const &v) { return dc::clamp(v[0], -0.5, 0.75); }, {x});
  auto lo = random_tensor({5}, 6, -1.0, -0.1), hi = random_tensor({4, 1}, 7, 0.1, 1.0);
  check_gradients([](auto const &v) { return dc::clamp(v[0], v[1], v[2]); }, {x, lo, hi});
  check_gradients([&](auto const &v) { return dc::clamp(v[0] * 2.0, lo, 1.0); }, {x});

  dc::tape tp;
  auto xv = tp.variable(x);
  auto c = values(dc::clamp(xv, -0.5, 0.75));
  auto xs = x.to_vector();
  for (std::size_t i = 0; i < xs.size(); ++i)
    CHECK(c[i] == std::min(std::max(xs[i], -0.5), 0.75));
  // lo > hi gives hi (PyTorch); the derivative at a bound is x's (inclusive).
  CHECK(values(dc::clamp(xv, 1.0, 0.0)) == std::vector<double>(xs.size(), 0.0));
  auto e = tp.variable(T64::from({3}, {-1.0, 0.0, 1.0}));
  tp.backward(dc::sum(dc::clamp(e, -1.0, 0.5)));
  CHECK(grads_of(e) == std::vector<double>{1.0, 1.0, 0.0});
  CHECK_THROWS_AS(dc::clamp(xv, random_tensor({3}, 1), 1.0), dc::shape_error);
}

TEST_CASE("torch ops: where selects, broadcasts, and sends no gradient to the other side") {
  auto a = random_tensor({3, 4}, 8), b = random_tensor({4}, 9);
  auto mask = random_mask({3, 1}, 10), full = random_mask({3, 4}, 11);
  check_gradients([&](auto const &v) { return dc::where(full, v[0], v[1]); }, {a, b});
  check_gradients([&](auto const &v) { return dc::where(mask, v[0] * v[0], dc::exp(v[1])); },
                  {a, b});
  check_gradients([&](auto const &v) { return dc::where(full, v[0], 0.0); }, {a});

  dc::tape tp;
  auto va = tp.variable(a), vb = tp.variable(b);
  auto w = values(dc::where(mask, va, vb));
  auto av = a.to_vector(), bv = b.to_vector(), mv = mask.to_vector();
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 4; ++j)
      CHECK(w[i * 4 + j] == (mv[i] != 0 ? av[i * 4 + j] : bv[j]));
  // A variable as the condition: its values decide, it gets no gradient.
  auto c = tp.variable(T64::from({4}, {0.0, 1.0, -2.0, 0.0}));
  auto y = dc::where(c, vb, 7.0);
  CHECK(values(y) == std::vector<double>{7.0, bv[1], bv[2], 7.0});
  tp.backward(dc::sum(y));
  CHECK(grads_of(c) == std::vector<double>(4, 0.0));
  CHECK(grads_of(vb) == std::vector<double>{0.0, 1.0, 1.0, 0.0});
  CHECK_THROWS_AS(dc::where(random_mask({2}, 1), va, vb), dc::shape_error);
}

TEST_CASE("torch ops: floor, ceil, round have zero gradient -- round is half to even") {
  // values away from integers (the finite differences would see the steps)
  std::vector<double> v;
  auto base = random_tensor({12}, 12, 0.05, 0.45).to_vector();
  for (std::size_t i = 0; i < base.size(); ++i)
    v.push_back(base[i] + double(int(i) - 6) + (i % 2 ? 0.5 : 0.0));
  auto x = T64::from({12}, v);
  check_gradients([](auto const &w) { return dc::floor(w[0]) * w[0] + dc::ceil(w[0]); }, {x});
  check_gradients([](auto const &w) { return dc::round(w[0] * 3.0) * dc::sin(w[0]); }, {x});

  dc::tape tp;
  auto h = tp.variable(T64::from({6}, {0.5, 1.5, 2.5, -0.5, -1.5, 1.2}));
  CHECK(values(dc::round(h)) == std::vector<double>{0.0, 2.0, 2.0, -0.0, -2.0, 1.0});
  CHECK(values(dc::floor(h)) == std::vector<double>{0.0, 1.0, 2.0, -1.0, -2.0, 1.0});
  CHECK(values(dc::ceil(h)) == std::vector<double>{1.0, 2.0, 3.0, -0.0, -1.0, 2.0});
  tp.backward(dc::sum(dc::floor(h) + dc::ceil(h) + dc::round(h)));
  CHECK(grads_of(h) == std::vector<double>(6, 0.0));
}

TEST_CASE("torch ops: the new elementwise functions unfused give the fused values and gradients") {
  auto x = random_tensor({2, 3}, 13), y = random_tensor({2, 3}, 14), m = random_mask({2, 3}, 15);
  auto run = [&](bool fused) {
    dc::tape tp;
    tp.fused = fused;
    auto a = tp.variable(x), b = tp.variable(y);
    V64 r = dc::where(m, dc::clamp(a, -0.3, b), dc::hypot(a, b)) + dc::atan2(a, b) +
            dc::maximum(a, b) * dc::minimum(a, 0.1) + dc::floor(a * 4.0);
    tp.backward(dc::sum(r));
    auto g = grads_of(a), gb = grads_of(b);
    g.insert(g.end(), gb.begin(), gb.end());
    auto rv = r.value().to_vector();
    g.insert(g.end(), rv.begin(), rv.end());
    return g;
  };
  check_close(run(true), run(false));
}

// ---- argmax / argmin, variance / stddev, norm
// --------------------------------------------------------
TEST_CASE("torch ops: argmax / argmin along an axis and over all elements -- ties and NaN") {
  auto x = random_tensor({3, 4, 5}, 20);
  auto xs = x.to_vector();
  for (int axis : {0, 1, 2, -1, -3})
    for (bool kd : {false, true}) {
      auto amax = dc::argmax(x, axis, kd), amin = dc::argmin(x, axis, kd);
      int const a = axis < 0 ? axis + 3 : axis;
      shape expect = x.dims();
      expect.ext[a] = 1;
      if (!kd) // drop the axis
        expect = a == 0 ? shape{4, 5} : a == 1 ? shape{3, 5} : shape{3, 4};
      CHECK(amax.dims == expect);
      CHECK(amin.dims == expect);
      // naive reference: scan the axis
      std::size_t k = 0;
      dc::index_t const st[3] = {20, 5, 1}, ext[3] = {3, 4, 5};
      for (dc::index_t i = 0; i < (a == 0 ? 1 : 3); ++i)
        for (dc::index_t j = 0; j < (a == 1 ? 1 : 4); ++j)
          for (dc::index_t l = 0; l < (a == 2 ? 1 : 5); ++l, ++k) {
            dc::index_t base = i * st[0] + j * st[1] + l * st[2], bmax = 0, bmin = 0;
            for (dc::index_t q = 1; q < ext[a]; ++q) {
              if (xs[std::size_t(base + q * st[a])] > xs[std::size_t(base + bmax * st[a])])
                bmax = q;
              if (xs[std::size_t(base + q * st[a])] < xs[std::size_t(base + bmin * st[a])])
                bmin = q;
            }
            CHECK(amax.values[k] == bmax);
            CHECK(amin.values[k] == bmin);
          }
    }
  // keepdims indices fit gather: the gathered values are max / min
  dc::tape tp;
  auto v = tp.variable(x);
  CHECK(values(dc::gather(v, 1, dc::argmax(v, 1, true))) == values(dc::max(v, {1}, true)));
  CHECK(values(dc::gather(v, -1, dc::argmin(v * 2.0, -1, true))) == values(dc::min(v, {2}, true)));
  // over all elements: the flat index
  auto flat = dc::argmax(v);
  CHECK(flat.dims == shape{});
  CHECK(flat.values.size() == 1);
  CHECK(flat.values[0] == std::max_element(xs.begin(), xs.end()) - xs.begin());
  CHECK(dc::argmin(x).values[0] == std::min_element(xs.begin(), xs.end()) - xs.begin());
  // ties: the lowest index; NaN: the first NaN
  double const nan = std::nan("");
  auto t = T64::from({2, 4}, {1, 3, 3, 0, 2, nan, 5, nan});
  CHECK(dc::argmax(t, 1).values == std::vector<dc::index_t>{1, 1});
  CHECK(dc::argmin(t, 1).values == std::vector<dc::index_t>{3, 1});
  CHECK(dc::argmax(t).values[0] == 5);
  CHECK_THROWS_AS(dc::argmax(x, 3), dc::index_error);
  CHECK_THROWS_AS(dc::argmin(T64::zeros({2, 0}), 1), dc::shape_error);
  CHECK(dc::argmin(T64::zeros({0, 3}), 1).values.empty());
}

TEST_CASE("torch ops: variance / stddev: axes, keepdims, correction -- values and gradients") {
  auto x = random_tensor({3, 4, 5}, 21);
  for (auto axes : std::vector<std::vector<int>>{{}, {0}, {-1}, {0, 2}})
    for (bool kd : {false, true})
      for (double corr : {1.0, 0.0}) {
        check_gradients([&](auto const &v) { return dc::variance(v[0], axes, kd, corr); }, {x});
        check_gradients([&](auto const &v) { return dc::stddev(v[0], axes, kd, corr); }, {x});
      }
  // values against the two-pass formula, along axis 1
  dc::tape tp;
  auto v = tp.variable(x);
  auto xs = x.to_vector();
  auto var1 = values(dc::variance(v, {1})), std0 = values(dc::stddev(v, {1}, true, 0));
  CHECK(dc::variance(v, {1}, true).value().dims() == shape{3, 1, 5});
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t l = 0; l < 5; ++l) {
      double m = 0, ss = 0;
      for (std::size_t j = 0; j < 4; ++j)
        m += xs[i * 20 + j * 5 + l] / 4;
      for (std::size_t j = 0; j < 4; ++j)
        ss += (xs[i * 20 + j * 5 + l] - m) * (xs[i * 20 + j * 5 + l] - m);
      CHECK(var1[i * 5 + l] == doctest::Approx(ss / 3));
      CHECK(std0[i * 5 + l] == doctest::Approx(std::sqrt(ss / 4)));
    }
  // zero variance: stddev's gradient is 0 (abs-like subgradient; the zero deviations win over
  // sqrt'(0) = inf)
  auto c = tp.variable(T64::full({4}, 0.5));
  tp.backward(dc::stddev(c));
  CHECK(grads_of(c) == std::vector<double>(4, 0.0));
  // one element with correction 1: 0 / 0 = NaN (PyTorch)
  CHECK(std::isnan(values(dc::variance(tp.variable(T64::from({1}, {2.0}))))[0]));
  CHECK_THROWS_AS(dc::variance(v, {3}), dc::index_error);
}

TEST_CASE("torch ops: norm for p = 1, 2, 3, inf, -inf -- gradient 0 at x = 0") {
  double const inf = std::numeric_limits<double>::infinity();
  auto x = random_tensor({3, 4}, 22);
  for (double p : {1.0, 2.0, 3.0, 0.5, inf, -inf})
    for (auto axes : std::vector<std::vector<int>>{{}, {1}, {-2}}) {
      INFO("p = " << p);
      check_gradients([&](auto const &v) { return dc::norm(v[0], p, axes); }, {x});
      check_gradients([&](auto const &v) { return dc::norm(v[0], p, axes, true); }, {x});
    }
  dc::tape tp;
  auto v = tp.variable(x);
  auto xs = x.to_vector();
  double n1 = 0, n2 = 0, n3 = 0, ninf = 0, nminf = inf;
  for (double e : xs) {
    n1 += std::abs(e), n2 += e * e, n3 += std::pow(std::abs(e), 3.0);
    ninf = std::max(ninf, std::abs(e)), nminf = std::min(nminf, std::abs(e));
  }
  CHECK(dc::norm(v).item() == doctest::Approx(std::sqrt(n2)));
  CHECK(dc::norm(v, 1).item() == doctest::Approx(n1));
  CHECK(dc::norm(v, 3).item() == doctest::Approx(std::cbrt(n3)));
  CHECK(dc::norm(v, inf).item() == ninf);
  CHECK(dc::norm(v, -inf).item() == nminf);
  CHECK(values(dc::norm(v, 2, {1})).size() == 3);
  // at zero: value 0, gradient 0 (a subgradient) for every p
  for (double p : {1.0, 2.0, 3.0, inf}) {
    dc::tape t0;
    auto z = t0.variable(T64::zeros({2, 3}));
    auto n = dc::norm(z, p);
    CHECK(n.item() == 0.0);
    t0.backward(n);
    CHECK(grads_of(z) == std::vector<double>(6, 0.0));
  }
  CHECK_THROWS_AS(dc::norm(v, 0.0), dc::error);
  CHECK_THROWS_AS(dc::norm(v, -1.0), dc::error);
}

// ---- shapes: squeeze / unsqueeze, split, repeat, flip, stack; negative axes and indices -------
TEST_CASE("torch ops: squeeze / unsqueeze") {
  auto x = random_tensor({2, 1, 3, 1}, 30);
  dc::tape tp;
  auto v = tp.variable(x);
  CHECK(dc::squeeze(v).dims() == shape{2, 3});
  CHECK(dc::squeeze(v, 1).dims() == shape{2, 3, 1});
  CHECK(dc::squeeze(v, -1).dims() == shape{2, 1, 3});
  CHECK(dc::squeeze(v, 0).dims() == shape{2, 1, 3, 1}); // extent 2: unchanged (PyTorch)
  CHECK(dc::unsqueeze(v, 0).dims() == shape{1, 2, 1, 3, 1});
  CHECK(dc::unsqueeze(v, -1).dims() == shape{2, 1, 3, 1, 1});
  CHECK(dc::unsqueeze(v, 2).dims() == shape{2, 1, 1, 3, 1});
  CHECK(values(dc::squeeze(v)) == x.to_vector());
  CHECK_THROWS_AS(dc::squeeze(v, 4), dc::index_error);
  CHECK_THROWS_AS(dc::unsqueeze(v, 5), dc::index_error);
  check_gradients([](auto const &w) { return dc::unsqueeze(dc::squeeze(w[0]), -2) * 2.0; }, {x});
  // a non-contiguous input (a transpose)
  check_gradients([](auto const &w) { return dc::squeeze(dc::transpose(w[0], 0, -1)); }, {x});
}

TEST_CASE("torch ops: split by size and by sizes -- pieces are views of one gradient") {
  auto x = random_tensor({7, 3}, 31);
  dc::tape tp;
  auto v = tp.variable(x);
  auto p = dc::split(v, 3); // 3, 3, 1
  REQUIRE(p.size() == 3);
  CHECK(p[0].dims() == shape{3, 3});
  CHECK(p[2].dims() == shape{1, 3});
  auto q = dc::split(v, {1, 2}, -1);
  REQUIRE(q.size() == 2);
  CHECK(q[1].dims() == shape{7, 2});
  auto xs = x.to_vector();
  CHECK(values(p[2]) == std::vector<double>(xs.begin() + 18, xs.end()));
  CHECK(values(q[0]) == std::vector<double>{xs[0], xs[3], xs[6], xs[9], xs[12], xs[15], xs[18]});
  CHECK(dc::split(v, 7).size() == 1);
  CHECK(dc::split(v, 10).size() == 1);
  CHECK_THROWS_AS(dc::split(v, {3, 3}), dc::shape_error);
  CHECK_THROWS_AS(dc::split(v, 0), dc::shape_error);
  CHECK_THROWS_AS(dc::split(v, 2, 2), dc::index_error);
  check_gradients(
      [](auto const &w) {
        auto s = dc::split(w[0], {2, 0, 5});
        return dc::concat(std::vector<V64>{s[2] * s[2], dc::exp(s[0])});
      },
      {x});
  check_gradients([](auto const &w) { return dc::split(w[0], 2, -1)[1] * 3.0; }, {x});
}

TEST_CASE("torch ops: split of an empty axis by a size gives one empty piece (torch.split)") {
  dc::tape tp;
  auto x = tp.variable(T64::zeros({0, 3}));
  for (dc::index_t size : {1, 2, 5}) {
    INFO("size " << size);
    auto p = dc::split(x, size, 0);
    REQUIRE(p.size() == 1);
    CHECK(p[0].dims() == shape{0, 3});
    auto q = dc::split(x, size, -2);
    REQUIRE(q.size() == 1);
    CHECK(q[0].dims() == shape{0, 3});
  }
  // Another axis of the same empty tensor is split as usual.
  auto r = dc::split(x, 2, 1);
  REQUIRE(r.size() == 2);
  CHECK(r[0].dims() == shape{0, 2});
  CHECK(r[1].dims() == shape{0, 1});
  CHECK_THROWS_AS(dc::split(x, 0, 0), dc::shape_error);
  // Backward runs through the empty piece: x gets an empty gradient of its shape, and the other
  // variables of the program their usual ones.
  auto u = tp.variable(random_tensor({2}, 39));
  tp.backward(dc::sum(dc::split(x, 2)[0] * 2.0) + dc::sum(u * u));
  CHECK(x.grad().dims() == shape{0, 3});
  auto us = u.value().to_vector();
  check_close(grads_of(u), {2 * us[0], 2 * us[1]});
  check_gradients(
      [](auto const &w) {
        auto e = dc::split(w[0], 2, 0);
        return dc::concat(std::vector<V64>{e[0] * 3.0, dc::exp(w[1])}, 0) * w[1];
      },
      {T64::zeros({0, 3}), random_tensor({2, 3}, 40)});
}

TEST_CASE("torch ops: repeat (PyTorch semantics) -- the gradient sums the copies") {
  auto x = T64::from({2, 3}, {1, 2, 3, 4, 5, 6});
  dc::tape tp;
  auto v = tp.variable(x);
  auto r = dc::repeat(v, {2, 2});
  CHECK(r.dims() == shape{4, 6});
  std::vector<double> expect;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j)
      expect.push_back(double((i % 2) * 3 + (j % 3) + 1));
  CHECK(values(r) == expect);
  auto r3 = dc::repeat(v, {3, 1, 2}); // a leading axis
  CHECK(r3.dims() == shape{3, 2, 6});
  CHECK(dc::repeat(v, {0, 1}).dims() == shape{0, 3});
  tp.backward(dc::sum(r3));
  CHECK(grads_of(v) == std::vector<double>(6, 6.0));
  CHECK_THROWS_AS(dc::repeat(v, {2}), dc::shape_error);
  CHECK_THROWS_AS(dc::repeat(v, {1, -1}), dc::shape_error);
  check_gradients(
      [](auto const &w) {
        return dc::repeat(w[0], {2, 1, 3});
      },
      {random_tensor({2, 3}, 32)});
}

TEST_CASE("torch ops: flip along axes, values and gradients") {
  auto x = random_tensor({2, 3, 4}, 33);
  auto xs = x.to_vector();
  dc::tape tp;
  auto v = tp.variable(x);
  auto f = values(dc::flip(v, {0, -1}));
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t k = 0; k < 4; ++k)
        CHECK(f[i * 12 + j * 4 + k] == xs[(1 - i) * 12 + j * 4 + (3 - k)]);
  CHECK(values(dc::flip(dc::flip(v, {1}), {1})) == xs);
  CHECK_THROWS_AS(dc::flip(v, {3}), dc::index_error);
  CHECK_THROWS_AS(dc::flip(v, {1, -2}), dc::index_error);
  CHECK_THROWS_AS(dc::slice(v, 0, 1, 0, -1), dc::index_error); // negative steps: use flip
  for (auto axes : std::vector<std::vector<int>>{{0}, {1, 2}, {-1}})
    check_gradients([axes](auto const &w) { return dc::flip(w[0] * w[0], axes); }, {x});
  check_gradients([](auto const &w) { return dc::flip(dc::transpose(w[0], 0, 2), {1}); }, {x});
}

TEST_CASE("torch ops: negative axes and indices (slice, index_select, gather, stack, transpose)") {
  auto x = random_tensor({3, 4}, 34);
  auto xs = x.to_vector();
  dc::tape tp;
  auto v = tp.variable(x);
  CHECK(values(dc::slice(v, -1, -3, -1)) ==
        std::vector<double>{xs[1], xs[2], xs[5], xs[6], xs[9], xs[10]});
  CHECK(values(dc::slice(v, 0, -1, 3)) == std::vector<double>(xs.begin() + 8, xs.end()));
  CHECK_THROWS_AS(dc::slice(v, 0, -4, 3), dc::index_error);
  CHECK(values(dc::index_select(v, -1, {-1, 0})) ==
        std::vector<double>{xs[3], xs[0], xs[7], xs[4], xs[11], xs[8]});
  CHECK_THROWS_AS(dc::index_select(v, 1, {-5}), dc::index_error);
  CHECK_THROWS_AS(dc::index_select(v, 1, {4}), dc::index_error);
  dc::index_array idx{{3, 1}, {-1, 0, -3}};
  CHECK(values(dc::gather(v, 1, idx)) == std::vector<double>{xs[3], xs[4], xs[9]});
  CHECK(dc::stack(std::vector<V64>{v, v}, -1).dims() == shape{3, 4, 2});
  CHECK(values(dc::stack(std::vector<V64>{v, v * 2.0}, -1))[1] == 2 * xs[0]);
  CHECK(dc::stack(std::vector<V64>{v, v}, -3).dims() == shape{2, 3, 4});
  CHECK_THROWS_AS(dc::stack(std::vector<V64>{v}, -4), dc::index_error);
  CHECK(dc::transpose(v, -1, -2).dims() == shape{4, 3});
  CHECK(dc::permute(v, {-1, 0}).dims() == shape{4, 3});
  CHECK_THROWS_AS(dc::permute(v, {1, 1}), dc::index_error);
  check_gradients(
      [idx](auto const &w) {
        return dc::index_select(w[0], -1, {-1, 1, -1}) * dc::gather(w[0], -1, idx) +
               dc::slice(w[0], -1, -3, 4);
      },
      {x});
  check_gradients(
      [](auto const &w) {
        return dc::stack(std::vector<V64>{w[0], w[1]}, -1);
      },
      {x, random_tensor({3, 4}, 35)});
}

namespace {
// A tensor's values in float.
dc::tensor<float> to_float(T64 const &x) {
  std::vector<float> v;
  for (double e : x.to_vector())
    v.push_back(float(e));
  return dc::tensor<float>::from(x.dims(), v);
}
} // namespace

TEST_CASE("torch ops: stack along every axis (negative ones too), float and double gradients") {
  std::vector<T64> const xs{random_tensor({3, 4}, 41), random_tensor({3, 4}, 42),
                            random_tensor({3, 4}, 43)};
  for (int axis : {0, 1, 2, -1, -2, -3}) {
    INFO("axis " << axis);
    // Non-linear pieces, one input used twice, one a transposed view: the gradients of the stacked
    // slices reach the right inputs.
    auto f = [axis](auto const &w) {
      return dc::stack(std::vector<V64>{dc::sin(w[0]), w[1] * w[0],
                                        dc::transpose(dc::transpose(w[2], 0, 1) * 2.0, 0, 1)},
                       axis);
    };
    check_gradients(f, xs);
    // The same program in float, against the double central differences (float rounding only).
    dc::tape tp;
    std::vector<dc::var<float>> v;
    for (auto const &x : xs)
      v.push_back(tp.variable(to_float(x)));
    dc::var<float> y = dc::stack(
        std::vector<dc::var<float>>{dc::sin(v[0]), v[1] * v[0],
                                    dc::transpose(dc::transpose(v[2], 0, 1) * 2.0f, 0, 1)},
        axis);
    int const ax = axis < 0 ? axis + 3 : axis;
    CHECK(y.dims() == (ax == 2 ? shape{3, 4, 3} : shape{3, 3, 4}));
    // weigh()'s weights, so that the central differences are those of the same loss.
    tp.backward(dc::sum(y * to_float(random_tensor(y.dims(), 777u + unsigned(y.size())))));
    for (std::size_t i = 0; i < xs.size(); ++i) {
      auto g = v[i].grad().to_vector();
      REQUIRE(g.size() == std::size_t(xs[i].size()));
      for (dc::index_t j = 0; j < xs[i].size(); ++j) {
        INFO("input " << i << " element " << j);
        CHECK(double(g[std::size_t(j)]) ==
              doctest::Approx(central_difference(f, xs, i, j)).epsilon(1e-5).scale(1.0));
      }
    }
  }
  dc::tape tp;
  auto a = tp.variable(xs[0]), b = tp.variable(random_tensor({4, 3}, 44));
  CHECK_THROWS_AS(dc::stack(std::vector<V64>{a, b}), dc::shape_error);
  CHECK_THROWS_AS(dc::stack(std::vector<V64>{a, a}, 3), dc::index_error);
  CHECK_THROWS_AS(dc::stack(std::vector<V64>{}), dc::shape_error);
}

// ---- matmul: 1-D operands, broadcast batches, batch ranks above 1 -----------------------------
namespace {
// A naive product of a (A0, A1, m, k) and b (B0, B1, k, n) with batch broadcasting (extent 1
// against any), row-major values.
std::vector<double> naive_matmul(std::vector<double> const &a, std::vector<dc::index_t> const &sa,
                                 std::vector<double> const &b, std::vector<dc::index_t> const &sb) {
  dc::index_t const m = sa[2], k = sa[3], n = sb[3];
  dc::index_t const c0 = std::max(sa[0], sb[0]), c1 = std::max(sa[1], sb[1]);
  std::vector<double> c;
  for (dc::index_t p = 0; p < c0; ++p)
    for (dc::index_t q = 0; q < c1; ++q)
      for (dc::index_t i = 0; i < m; ++i)
        for (dc::index_t j = 0; j < n; ++j) {
          double s = 0;
          dc::index_t const ao = ((sa[0] == 1 ? 0 : p) * sa[1] + (sa[1] == 1 ? 0 : q)) * m * k;
          dc::index_t const bo = ((sb[0] == 1 ? 0 : p) * sb[1] + (sb[1] == 1 ? 0 : q)) * k * n;
          for (dc::index_t l = 0; l < k; ++l)
            s += a[std::size_t(ao + i * k + l)] * b[std::size_t(bo + l * n + j)];
          c.push_back(s);
        }
  return c;
}
} // namespace

TEST_CASE("torch ops: matmul with 1-D operands and broadcast batch dimensions") {
  struct case_t {
    shape a, b, out;
    std::vector<dc::index_t> pa, pb; // as (batch0, batch1, rows, cols) for the reference
  };
  std::vector<case_t> const cases = {
      {{3}, {3, 4}, {4}, {1, 1, 1, 3}, {1, 1, 3, 4}},                         // vector @ matrix
      {{2, 3}, {3}, {2}, {1, 1, 2, 3}, {1, 1, 3, 1}},                         // matrix @ vector
      {{3}, {3}, {}, {1, 1, 1, 3}, {1, 1, 3, 1}},                             // dot
      {{3}, {2, 3, 4}, {2, 4}, {1, 1, 1, 3}, {1, 2, 3, 4}},                   // vector @ batch
      {{2, 2, 3}, {3}, {2, 2}, {1, 2, 2, 3}, {1, 1, 3, 1}},                   // batch @ vector
      {{1, 2, 3}, {3, 3, 4}, {3, 2, 4}, {1, 1, 2, 3}, {1, 3, 3, 4}},          // 1 vs B
      {{3, 2, 3}, {1, 3, 4}, {3, 2, 4}, {1, 3, 2, 3}, {1, 1, 3, 4}},          // B vs 1
      {{2, 1, 2, 3}, {3, 3, 2}, {2, 3, 2, 2}, {2, 1, 2, 3}, {1, 3, 3, 2}},    // rank 4 @ rank 3
      {{2, 3, 2, 3}, {2, 3, 3, 2}, {2, 3, 2, 2}, {2, 3, 2, 3}, {2, 3, 3, 2}}, // rank 4 @ rank 4
      {{2, 3, 2, 3}, {3, 2}, {2, 3, 2, 2}, {2, 3, 2, 3}, {1, 1, 3, 2}},       // rank 4 @ shared
  };
  unsigned seed = 40;
  for (auto const &c : cases) {
    INFO("a " << dc::to_string(c.a) << " b " << dc::to_string(c.b));
    auto a = random_tensor(c.a, seed++), b = random_tensor(c.b, seed++);
    dc::tape tp;
    auto y = dc::matmul(tp.variable(a), tp.variable(b));
    CHECK(y.dims() == c.out);
    check_close(y.value().to_vector(), naive_matmul(a.to_vector(), c.pa, b.to_vector(), c.pb));
    check_gradients([](auto const &v) { return dc::matmul(v[0], v[1]); }, {a, b});
  }
  // strided operands (a transposed batch, a sliced vector) and a lazy operand
  check_gradients(
      [](auto const &v) {
        return dc::matmul(dc::transpose(v[0], -1, -2), dc::slice(v[1], 0, 0, 6, 2) * 2.0);
      },
      {random_tensor({2, 1, 3, 2}, 60), random_tensor({6}, 61)});
  dc::tape tp;
  auto v3 = tp.variable(random_tensor({3}, 62)), m23 = tp.variable(random_tensor({2, 3}, 63));
  CHECK_THROWS_AS(dc::matmul(v3, m23), dc::shape_error);                             // (3) @ (2, 3)
  CHECK_THROWS_AS(dc::matmul(tp.variable(T64::full({}, 1.0)), v3), dc::shape_error); // rank 0
  CHECK_THROWS_AS(dc::matmul(tp.variable(random_tensor({2, 2, 3}, 64)),
                             tp.variable(random_tensor({3, 3, 1}, 65))),
                  dc::shape_error); // batches 2 and 3
  // empty batch and inner dimension: zeros
  auto e = dc::matmul(tp.variable(T64::zeros({2, 1, 3, 0})), tp.variable(T64::zeros({4, 0, 2})));
  CHECK(e.dims() == shape{2, 4, 3, 2});
  CHECK(e.value().to_vector() == std::vector<double>(48, 0.0));
}

// ---- index_add, scatter_add, scatter, masked_select ------------------------------------------
TEST_CASE("torch ops: index_add (duplicates sum -- into a constant) and scatter_add") {
  auto x = random_tensor({4, 3}, 70), src = random_tensor({4, 5}, 71);
  std::vector<dc::index_t> const idx{2, 0, -1, 2, 0}; // duplicates, a negative index
  check_gradients([&](auto const &v) { return dc::index_add(v[0], 1, idx, v[1]); }, {x, src});
  check_gradients(
      [&](auto const &v) {
        return dc::index_add(T64::zeros({4, 3}), -1, idx, v[0]);
      },
      {src});
  dc::tape tp;
  auto vx = tp.variable(x), vs = tp.variable(src);
  auto y = values(dc::index_add(vx, 1, idx, vs));
  auto xs = x.to_vector(), ss = src.to_vector();
  std::vector<double> ref = xs;
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t i = 0; i < idx.size(); ++i)
      ref[r * 3 + std::size_t((idx[i] + 3) % 3)] += ss[r * 5 + i];
  check_close(y, ref);
  CHECK_THROWS_AS(dc::index_add(vx, 1, {0, 1}, vs), dc::shape_error);
  CHECK_THROWS_AS(dc::index_add(vx, 1, {0, 1, 3, 0, 0}, vs), dc::index_error);
  CHECK_THROWS_AS(dc::index_add(vx, 2, idx, vs), dc::index_error);

  // scatter_add along axis 0 with an index smaller than x outside the axis
  dc::index_array const index{{3, 2}, {0, 1, 3, 1, 0, -3}};
  auto s2 = random_tensor({3, 2}, 72);
  check_gradients([&](auto const &v) { return dc::scatter_add(v[0], 0, index, v[1]); }, {x, s2});
  auto z = values(dc::scatter_add(vx, 0, index, tp.variable(s2)));
  ref = xs;
  auto s2v = s2.to_vector();
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 2; ++j)
      ref[std::size_t((index.values[i * 2 + j] + 4) % 4) * 3 + j] += s2v[i * 2 + j];
  check_close(z, ref);
  CHECK_THROWS_AS(dc::scatter_add(vx, 0, index, vs), dc::shape_error);
  CHECK_THROWS_AS(dc::scatter_add(vx, 0, dc::index_array{{1, 4}, {0, 0, 0, 0}}, T64::zeros({1, 4})),
                  dc::shape_error);
}

TEST_CASE("torch ops: scatter overwrites -- the last duplicate wins and alone gets the gradient") {
  auto x = random_tensor({3, 4}, 73), src = random_tensor({3, 3}, 74);
  dc::index_array const index{{3, 3}, {1, 3, 1, 0, 0, 2, -1, 2, 0}}; // rows 0 and 1: duplicates
  check_gradients([&](auto const &v) { return dc::scatter(v[0], 1, index, v[1]); }, {x, src});
  dc::tape tp;
  auto vx = tp.variable(x), vs = tp.variable(src);
  auto y = dc::scatter(vx, 1, index, vs);
  auto ref = x.to_vector();
  auto sv = src.to_vector();
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 3; ++j) // in order: the last write stays
      ref[i * 4 + std::size_t((index.values[i * 3 + j] + 4) % 4)] = sv[i * 3 + j];
  CHECK(values(y) == ref);
  tp.backward(dc::sum(y));
  CHECK(grads_of(vx) == std::vector<double>{1, 0, 1, 0, 0, 1, 0, 1, 0, 1, 0, 0});
  CHECK(grads_of(vs) == std::vector<double>{0, 1, 1, 0, 1, 1, 1, 1, 1});
  CHECK_THROWS_AS(dc::scatter(vx, 1, dc::index_array{{1, 1}, {4}}, T64::zeros({1, 1})),
                  dc::index_error);
}

TEST_CASE("torch ops: masked_select gives a 1-D variable -- the gradient scatters back") {
  auto x = random_tensor({3, 4}, 75);
  auto mask = random_mask({3, 4}, 76), row = random_mask({4}, 77);
  check_gradients([&](auto const &v) { return dc::masked_select(v[0] * v[0], mask); }, {x});
  check_gradients([&](auto const &v) { return dc::masked_select(dc::transpose(v[0]), row); },
                  {random_tensor({4, 3}, 78)});
  dc::tape tp;
  auto v = tp.variable(x);
  auto sel = dc::masked_select(v, mask);
  auto xs = x.to_vector(), ms = mask.to_vector();
  std::vector<double> ref;
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (ms[i] != 0)
      ref.push_back(xs[i]);
  CHECK(sel.dims() == shape{dc::index_t(ref.size())});
  CHECK(values(sel) == ref);
  tp.backward(dc::sum(sel));
  CHECK(grads_of(v) == ms);
  CHECK(dc::masked_select(v, T64::zeros({3, 4})).dims() == shape{0});
  CHECK_THROWS_AS(dc::masked_select(v, T64::zeros({3})), dc::shape_error);
}

// ---- softmax family over several axes --------------------------------------------------------
TEST_CASE("torch ops: softmax, log_softmax, logsumexp over several axes") {
  auto x = random_tensor({2, 3, 4}, 80, -3, 3);
  for (auto axes : std::vector<std::vector<int>>{{1, 2}, {0, -1}, {}, {2, 0}}) {
    check_gradients([axes](auto const &v) { return dc::softmax(v[0], axes); }, {x});
    check_gradients([axes](auto const &v) { return dc::log_softmax(v[0], axes); }, {x});
    check_gradients([axes](auto const &v) { return dc::logsumexp(v[0], axes); }, {x});
    check_gradients([axes](auto const &v) { return dc::logsumexp(v[0], axes, true); }, {x});
  }
  // values: over axes {0, 2} of a (2, 3, 4) array, the group of axis-1 position j
  dc::tape tp;
  auto v = tp.variable(x);
  auto xs = x.to_vector();
  auto sm = values(dc::softmax(v, {0, 2})), ls = values(dc::log_softmax(v, {0, 2}));
  auto lse = dc::logsumexp(v, {0, 2}, true);
  CHECK(lse.dims() == shape{1, 3, 1});
  CHECK(dc::logsumexp(v, {0, 2}).dims() == shape{3});
  CHECK(dc::logsumexp(v, std::vector<int>{}).dims() == shape{});
  auto lv = values(lse);
  for (std::size_t j = 0; j < 3; ++j) {
    double s = 0;
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t k = 0; k < 4; ++k)
        s += std::exp(xs[i * 12 + j * 4 + k]);
    CHECK(lv[j] == doctest::Approx(std::log(s)));
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t k = 0; k < 4; ++k) {
        CHECK(sm[i * 12 + j * 4 + k] == doctest::Approx(std::exp(xs[i * 12 + j * 4 + k]) / s));
        CHECK(ls[i * 12 + j * 4 + k] == doctest::Approx(xs[i * 12 + j * 4 + k] - std::log(s)));
      }
  }
  // one axis in a list is the one-axis overload
  CHECK(values(dc::softmax(v, std::vector<int>{-1})) == values(dc::softmax(v, -1)));
  CHECK(values(dc::logsumexp(tp.variable(T64::zeros({2, 0, 3})), {1, 2}))[0] ==
        -std::numeric_limits<double>::infinity());
  CHECK_THROWS_AS(dc::softmax(v, {0, 0}), dc::index_error);
  CHECK_THROWS_AS(dc::logsumexp(v, 3), dc::index_error);
}
