// Tests of the operations a PyTorch user reaches for (issue 14, item 6): elementwise where /
// minimum / maximum / clamp / atan2 / hypot / floor / ceil / round on tape variables (lazy, fused),
// argmax / argmin, var / std, norm, squeeze / unsqueeze, split, repeat, flip, negative axes and
// indices, matmul with 1-D operands and broadcast batch dimensions, scatter / index_add,
// masked_select, and the softmax family over several axes. Gradients against central
// differences in double precision on random inputs, values against naive references, errors
// for bad arguments.
#include <dualcast/autodiff.hpp>

#include <doctest/doctest.h>

#include "tape_support.hpp"

#include <algorithm>
#include <cmath>
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

TEST_CASE("torch ops: maximum / minimum ties split the gradient half and half; NaN propagates") {
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

TEST_CASE("torch ops: floor, ceil, round have zero gradient; round is half to even") {
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
