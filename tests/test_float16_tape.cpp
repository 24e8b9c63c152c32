// Issue 37: bfloat16 / half variables on the tape (computed in float: ops/fused/float16_node.hpp
// and ops/detail/float16_tape.hpp),
// the cast node between precisions, float master weights and the dynamic loss scaler.
//
// Gradients are checked against central differences in double of the same function at the same
// (16-bit) inputs. The loss is sum(float(f(x)) * w) with w a float constant, so a 16-bit gradient
// has these roundings: w to 16 bits where it enters f's output (cast backward), float arithmetic
// inside the node, and the input gradient rounded once to 16 bits. The bound per element is
//   |g - ref| <= k u (|ref| + max |ref|) + 1e-6
// with u the unit roundoff (2^-8 bfloat16, 2^-11 half), k = 4 for elementwise nodes and k = 8 for
// reductions, matmul and softmax (their gradients sum terms each carrying a rounding), and 1e-6
// for the central differences' own error.
#include "models/char_lstm.hpp"
#include "tape_support.hpp"

#include <dualcast/autodiff.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

namespace {
namespace dc = dualcast;

template <class T16> constexpr double unit_roundoff() {
  return std::is_same_v<T16, dc::bfloat16> ? 1.0 / 256 : 1.0 / 2048;
}

// Random values in [lo, hi) that are exact in T16 (so double sees the same inputs).
template <class T16>
std::vector<double> exact16(dc::index_t n, unsigned seed, double lo, double hi) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto &x : v)
    x = double(float(T16(float(d(g)))));
  return v;
}
template <class T> dc::tensor<T> as_tensor(dc::shape const &s, std::vector<double> const &v) {
  auto t = dc::tensor<T>::empty(s);
  for (std::size_t i = 0; i < v.size(); ++i)
    t.raw_data()[i] = T(float(v[i]));
  return t;
}
template <class T> std::vector<double> doubles(dc::tensor<T> const &t) {
  std::vector<double> r;
  for (T x : t.to_vector()) {
    if constexpr (std::is_same_v<T, double>)
      r.push_back(x);
    else
      r.push_back(double(float(x)));
  }
  return r;
}

// f: a generic callable over variables of one element type (double for the reference, T16 for
// the tape under test), returning one variable.
template <class T16, class F>
void check16(F const &f, std::vector<dc::shape> const &shapes, double k, unsigned seed,
             double lo = -1.0, double hi = 1.0) {
  std::vector<std::vector<double>> xs;
  for (std::size_t i = 0; i < shapes.size(); ++i)
    xs.push_back(exact16<T16>(shapes[i].size(), seed + unsigned(i), lo, hi));
  // The 16-bit tape.
  dc::tape tp;
  std::vector<dc::var<T16>> vs;
  for (std::size_t i = 0; i < shapes.size(); ++i)
    vs.push_back(tp.variable(as_tensor<T16>(shapes[i], xs[i])));
  dc::var<T16> y = f(vs);
  std::vector<double> w64;
  for (double x : exact16<float>(y.value().size(), seed + 99, -1.0, 1.0))
    w64.push_back(x);
  auto wf = as_tensor<float>(y.dims(), w64);
  tp.backward(dc::sum(dc::cast<float>(y) * wf));
  // The reference: the same function in double, on a tape without gradients.
  auto loss = [&](std::vector<std::vector<double>> const &at) {
    dc::tape t2;
    std::vector<dc::var<double>> cs;
    for (std::size_t i = 0; i < shapes.size(); ++i)
      cs.push_back(t2.constant(dc::tensor<double>::from(shapes[i], at[i])));
    auto yd = doubles(f(cs).value());
    double s = 0;
    for (std::size_t j = 0; j < yd.size(); ++j)
      s += yd[j] * w64[j];
    return s;
  };
  double const u = unit_roundoff<T16>(), h = 1e-6;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    std::vector<double> ref(xs[i].size());
    for (std::size_t j = 0; j < ref.size(); ++j) {
      auto p = xs, m = xs;
      p[i][j] += h;
      m[i][j] -= h;
      ref[j] = (loss(p) - loss(m)) / (2 * h);
    }
    double big = 0;
    for (double r : ref)
      big = std::max(big, std::abs(r));
    auto const g = doubles(vs[i].grad());
    REQUIRE(g.size() == ref.size());
    for (std::size_t j = 0; j < ref.size(); ++j) {
      INFO("input " << i << " element " << j << ": " << g[j] << " vs " << ref[j]);
      CHECK(std::abs(g[j] - ref[j]) <= k * u * (std::abs(ref[j]) + big) + 1e-6);
    }
  }
}

constexpr auto lstm_like =
    dc::kernel([](auto a, auto b) { return dc::outputs(dc::sigmoid(a) * dc::tanh(b), a * b); });
constexpr auto three_args =
    dc::kernel([](auto a, auto b, auto c) { return dc::sigmoid(a) * b + c * dc::tanh(a); });

template <class T16> void all_operations() {
  dc::shape const m{4, 5};
  SUBCASE("lazy elementwise") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> {
          return v[0] * v[1] + dc::exp(v[0]) - dc::tanh(v[1]);
        },
        {m, m}, 4, 1);
  }
  SUBCASE("broadcast operand (its gradient summed in float)") {
    check16<T16>([](auto const &v) -> std::remove_cvref_t<decltype(v[0])> { return v[0] * v[1]; },
                 {m, dc::shape{5}}, 8, 2);
  }
  SUBCASE("fused kernel, two outputs") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> {
          auto o = dc::fused(lstm_like, v[0], v[1]);
          return o[0] + o[1] * 0.5f;
        },
        {m, m}, 4, 3);
  }
  SUBCASE("sum over an axis") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> { return dc::sum(v[0], {1}); },
        {m}, 8, 4);
  }
  SUBCASE("mean") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> { return dc::mean(v[0]); }, {m}, 8,
        5);
  }
  SUBCASE("sum over axes {0, 2} with keepdims (a 16-bit node: no cast, no float copy)") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> {
          return dc::sum(v[0], {0, 2}, true);
        },
        {dc::shape{3, 4, 5}}, 8, 15);
  }
  SUBCASE("mean over axis 0 of a slice (a strided 16-bit operand)") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> {
          return dc::mean(dc::slice(v[0], 1, 1, 4), {0});
        },
        {m}, 8, 16);
  }
  SUBCASE("softmax over axis 0 (rows through a 16-bit permuted copy)") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> { return dc::softmax(v[0], 0); },
        {m}, 8, 17, -4.0, 4.0);
  }
  SUBCASE("logsumexp over axes {0, 2} with keepdims; log_softmax over all axes") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> {
          return dc::logsumexp(v[0], {0, 2}, true) + dc::sum(dc::log_softmax(v[1], {}), {0});
        },
        {dc::shape{3, 4, 5}, dc::shape{2, 4}}, 8, 18, -4.0, 4.0);
  }
  SUBCASE("matmul") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> { return dc::matmul(v[0], v[1]); },
        {m, dc::shape{5, 3}}, 8, 6);
  }
  SUBCASE("matmul, a slice of a variable times a matrix (its gradient a strided view)") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> {
          return dc::matmul(dc::slice(v[0], 1, 1, 4), v[1]);
        },
        {m, dc::shape{3, 2}}, 8, 14);
  }
  SUBCASE("batched matmul: a batch of matrices times a shared matrix (its gradient summed)") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> { return dc::matmul(v[0], v[1]); },
        {dc::shape{3, 4, 5}, dc::shape{5, 2}}, 8, 22);
  }
  SUBCASE("batched matmul: batches broadcast against each other") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> { return dc::matmul(v[0], v[1]); },
        {dc::shape{2, 1, 3, 4}, dc::shape{3, 4, 2}}, 8, 23);
  }
  SUBCASE("1-D matmul: vector times matrix, batch times vector, vector times vector") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> {
          return dc::matmul(v[0], v[1]) + dc::sum(dc::matmul(v[2], v[0])) + dc::matmul(v[0], v[0]);
        },
        {dc::shape{5}, dc::shape{5, 3}, dc::shape{2, 3, 5}}, 8, 24);
  }
  SUBCASE("softmax") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> { return dc::softmax(v[0], 1); },
        {m}, 8, 7);
  }
  SUBCASE("logsumexp") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> { return dc::logsumexp(v[0], 1); },
        {m}, 8, 8);
  }
  SUBCASE("log_softmax") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> {
          return dc::log_softmax(v[0], 1);
        },
        {m}, 8, 9);
  }
  SUBCASE("packed lstm_cell (gate slices of one 16-bit variable)") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> {
          auto [h, c] = dc::lstm_cell(v[0], v[1]);
          return h + c;
        },
        {dc::shape{3, 8}, dc::shape{3, 2}}, 4, 10, -3.0, 3.0);
  }
  SUBCASE("lstm_cell on five 16-bit variables, c broadcast along the batch") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> {
          auto [h, c] = dc::lstm_cell(v[0], v[1], v[2], v[3], v[4]);
          return h + c;
        },
        {m, m, m, m, dc::shape{5}}, 4, 12, -3.0, 3.0);
  }
  SUBCASE("fused kernel under policy::store (the 16-bit store node: float partials)") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> {
          auto o = dc::fused(dc::policy::store, lstm_like, v[0], v[1]);
          return o[0] + o[1] * 0.5f;
        },
        {m, m}, 4, 13);
  }
  SUBCASE("store node: a repeated variable and a broadcast one (gradients summed in float)") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> {
          return dc::fused(dc::policy::store, three_args, v[0], v[1], v[0]);
        },
        {m, dc::shape{5}}, 8, 19);
  }
  SUBCASE("lazy expression evaluated under policy::store") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> {
          return dc::eval(dc::policy::store, v[0] * v[1] + dc::exp(v[0]) - dc::tanh(v[1]))[0];
        },
        {m, m}, 4, 20);
  }
  SUBCASE("lstm_cell under policy::store, c broadcast along the batch") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> {
          auto [h, c] = dc::lstm_cell(dc::policy::store, v[0], v[1], v[2], v[3], v[4]);
          return h + c;
        },
        {m, m, m, m, dc::shape{5}}, 4, 21, -3.0, 3.0);
  }
  SUBCASE("gru_cell") {
    check16<T16>(
        [](auto const &v) -> std::remove_cvref_t<decltype(v[0])> {
          return dc::gru_cell(v[0], v[1], v[2]);
        },
        {dc::shape{3, 6}, dc::shape{3, 6}, dc::shape{3, 2}}, 4, 11, -3.0, 3.0);
  }
}

} // namespace

TEST_CASE("16-bit tape: gradients of every 16-bit operation against double central differences") {
  SUBCASE("bfloat16") { all_operations<dc::bfloat16>(); }
  SUBCASE("half") { all_operations<dc::half>(); }
}

TEST_CASE("16-bit tape: cast round trip float -> bfloat16 -> float") {
  auto xs = exact16<float>(12, 21, -3.0, 3.0);
  auto ws = exact16<float>(12, 22, -3.0, 3.0);
  dc::tape tp;
  auto x = tp.variable(as_tensor<float>({3, 4}, xs));
  auto w = as_tensor<float>({3, 4}, ws);
  auto xb = dc::cast<dc::bfloat16>(x);
  auto y = dc::cast<float>(xb);
  tp.backward(dc::sum(y * w));
  auto const yv = y.value().to_vector(), g = x.grad().to_vector();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    // forward: each value rounded once to nearest even (numbers/float16.hpp is the reference of
    // the rounding, tested exhaustively in test_float16.cpp); backward: the gradient w rounded
    // to bfloat16 on its way through the bfloat16 variable, and widened exactly.
    CHECK(yv[i] == float(dc::bfloat16(float(xs[i]))));
    CHECK(g[i] == float(dc::bfloat16(float(ws[i]))));
    CHECK(std::abs(double(g[i]) - ws[i]) <= std::abs(ws[i]) / 256);
  }
  // double -> half -> double: a value of half's range survives within half's roundoff.
  auto d = dc::tensor<double>::from({2}, {1.0 / 3.0, -70000.0});
  auto h = dc::cast<double>(dc::cast<dc::half>(d)).to_vector();
  CHECK(std::abs(h[0] - 1.0 / 3.0) <= (1.0 / 3.0) / 2048);
  CHECK(std::isinf(h[1])); // beyond 65504: infinity, as IEEE rounding says
}

TEST_CASE("16-bit tape: float master weights in a mixed float / bfloat16 graph") {
  // loss = sum(softmax(X_bf16 @ bf16(W_float)) * C): W's gradient arrives in float through the
  // cast, against central differences of the same function in double.
  auto xs = exact16<dc::bfloat16>(4 * 6, 31, -1.0, 1.0);
  auto ws = exact16<dc::bfloat16>(6 * 3, 32, -1.0, 1.0);
  auto cs = exact16<dc::bfloat16>(4 * 3, 33, -1.0, 1.0);
  dc::tape tp;
  auto W = tp.variable(as_tensor<float>({6, 3}, ws));
  auto X = tp.constant(as_tensor<dc::bfloat16>({4, 6}, xs));
  auto C = as_tensor<float>({4, 3}, cs);
  auto p = dc::softmax(dc::matmul(X, dc::cast<dc::bfloat16>(W)), 1);
  tp.backward(dc::sum(dc::cast<float>(p) * C));
  REQUIRE(W.grad().dims() == dc::shape{6, 3});
  auto f = [&](std::vector<double> const &w) {
    dc::tape t2;
    auto pd = dc::softmax(dc::matmul(t2.constant(dc::tensor<double>::from({4, 6}, xs)),
                                     t2.constant(dc::tensor<double>::from({6, 3}, w))),
                          1)
                  .value()
                  .to_vector();
    double s = 0;
    for (std::size_t i = 0; i < pd.size(); ++i)
      s += pd[i] * cs[i];
    return s;
  };
  auto const g = W.grad().to_vector();
  std::vector<double> ref(ws.size());
  double big = 0;
  for (std::size_t j = 0; j < ws.size(); ++j) {
    auto a = ws, b = ws;
    a[j] += 1e-6, b[j] -= 1e-6;
    ref[j] = (f(a) - f(b)) / 2e-6;
    big = std::max(big, std::abs(ref[j]));
  }
  for (std::size_t j = 0; j < ws.size(); ++j)
    CHECK(std::abs(g[j] - ref[j]) <= 8.0 / 256 * (std::abs(ref[j]) + big) + 1e-6);
}

// A float cell state beside 16-bit gates in one fused call (lstm_cell): the outputs stay float,
// c's gradient is float throughout, the gates' gradients are rounded once to 16 bits. Against
// central differences in double of loss = sum(h * w1) + sum(c' * w2).
template <class T16> void mixed_lstm_cell() {
  dc::index_t const B = 3, H = 5;
  auto gs = exact16<T16>(B * 4 * H, 51, -3.0, 3.0);
  auto cs = exact16<float>(B * H, 52, -2.0, 2.0);
  auto w1 = exact16<float>(B * H, 53, -1.0, 1.0), w2 = exact16<float>(B * H, 54, -1.0, 1.0);
  dc::tape tp;
  auto G = tp.variable(as_tensor<T16>({B, 4 * H}, gs));
  auto C = tp.variable(as_tensor<float>({B, H}, cs));
  auto [h, c2] = dc::lstm_cell(G, C);
  static_assert(std::is_same_v<decltype(h), dc::var<float>> &&
                std::is_same_v<decltype(c2), dc::var<float>>);
  tp.backward(dc::sum(h * as_tensor<float>({B, H}, w1)) +
              dc::sum(c2 * as_tensor<float>({B, H}, w2)));
  auto loss = [&](std::vector<double> const &g, std::vector<double> const &c) {
    dc::tape t2;
    auto [hd, cd] = dc::lstm_cell(t2.constant(dc::tensor<double>::from({B, 4 * H}, g)),
                                  t2.constant(dc::tensor<double>::from({B, H}, c)));
    auto const hv = hd.value().to_vector(), cv = cd.value().to_vector();
    double s = 0;
    for (std::size_t j = 0; j < hv.size(); ++j)
      s += hv[j] * w1[j] + cv[j] * w2[j];
    return s;
  };
  auto check = [&](std::vector<double> const &got, bool gates, double bound_u) {
    std::vector<double> const &x0 = gates ? gs : cs;
    std::vector<double> ref(x0.size());
    double big = 0;
    for (std::size_t j = 0; j < x0.size(); ++j) {
      auto p = x0, m = x0;
      p[j] += 1e-6, m[j] -= 1e-6;
      ref[j] = gates ? (loss(p, cs) - loss(m, cs)) / 2e-6 : (loss(gs, p) - loss(gs, m)) / 2e-6;
      big = std::max(big, std::abs(ref[j]));
    }
    REQUIRE(got.size() == ref.size());
    for (std::size_t j = 0; j < ref.size(); ++j) {
      INFO((gates ? "gate " : "cell ") << j << ": " << got[j] << " vs " << ref[j]);
      CHECK(std::abs(got[j] - ref[j]) <= 4 * bound_u * (std::abs(ref[j]) + big) + 1e-6);
    }
  };
  check(doubles(G.grad()), true, unit_roundoff<T16>());
  check(doubles(C.grad()), false, 1.0 / (1 << 22)); // (float: a few roundings of 2^-24)
  // The values: float, not rounded to 16 bits (c' of a float c keeps float's bits).
  dc::tape t3;
  auto [hr, cr] = dc::lstm_cell(t3.constant(dc::tensor<double>::from({B, 4 * H}, gs)),
                                t3.constant(dc::tensor<double>::from({B, H}, cs)));
  auto const cv = doubles(c2.value()), cref = cr.value().to_vector();
  for (std::size_t j = 0; j < cv.size(); ++j)
    CHECK(std::abs(cv[j] - cref[j]) <= 1e-6 * (1 + std::abs(cref[j])));
}

TEST_CASE("16-bit tape: one fused call over 16-bit gates and a float cell state") {
  SUBCASE("bfloat16") { mixed_lstm_cell<dc::bfloat16>(); }
  SUBCASE("half") { mixed_lstm_cell<dc::half>(); }
}

// The fused node over 16-bit variables (ops/fused/float16_node.hpp) is ONE node that keeps
// nothing but references to its 16-bit inputs: no cast nodes, no float copies, no partials. Under
// policy::store it is ONE node too, keeping its float partials (K * A arrays) and not the inputs.
template <class T16> void native_node_memory() {
  dc::shape const s{16, 32};
  auto const n = std::size_t(s.size());
  std::vector<dc::tensor<T16>> x;
  for (unsigned i = 0; i < 5; ++i)
    x.push_back(as_tensor<T16>(s, exact16<T16>(s.size(), 60 + i, -3.0, 3.0)));
  dc::tape tp;
  std::vector<dc::var<T16>> v;
  for (auto const &t : x)
    v.push_back(tp.variable(t));
  auto [h, c] = dc::lstm_cell(v[0], v[1], v[2], v[3], v[4]);
  static_assert(std::is_same_v<decltype(h), dc::var<T16>>);
  CHECK(tp.node_count() == 1);
  CHECK(tp.saved_bytes() == 5 * n * sizeof(T16)); // (the inputs' own storage)
  dc::tape ts;
  std::vector<dc::var<T16>> w;
  for (auto const &t : x)
    w.push_back(ts.variable(t));
  auto [hs, cs] = dc::lstm_cell(dc::policy::store, w[0], w[1], w[2], w[3], w[4]);
  static_assert(std::is_same_v<decltype(hs), dc::var<T16>>);
  CHECK(ts.node_count() == 1);
  CHECK(ts.saved_bytes() == 2 * 5 * n * sizeof(float));
  // The same values to one 16-bit rounding (both round once from float arithmetic on the same
  // inputs; the store pass may contract multiply-adds differently).
  for (auto [a, b] : {std::pair{doubles(h.value()), doubles(hs.value())},
                      std::pair{doubles(c.value()), doubles(cs.value())}})
    for (std::size_t j = 0; j < a.size(); ++j)
      CHECK(std::abs(a[j] - b[j]) <= unit_roundoff<T16>() * std::abs(b[j]));
  // The two nodes' gradients agree to float rounding (both are float derivatives at the same
  // 16-bit inputs, each gradient rounded once to 16 bits): one 16-bit rounding apart.
  tp.backward(dc::sum(dc::cast<float>(h) + dc::cast<float>(c)));
  ts.backward(dc::sum(dc::cast<float>(hs) + dc::cast<float>(cs)));
  for (std::size_t i = 0; i < 5; ++i) {
    auto const a = doubles(v[i].grad()), b = doubles(w[i].grad());
    for (std::size_t j = 0; j < a.size(); ++j)
      CHECK(std::abs(a[j] - b[j]) <= 2 * unit_roundoff<T16>() * std::abs(b[j]) + 1e-6);
  }
  // The cost model applies to 16-bit nodes, partials counted in float and inputs at 16 bits: a
  // variable beside four 16-bit constants stores (8 bytes of partials per element against 10 of
  // inputs plus 4 of re-evaluation), the LSTM cell above recomputes.
  dc::tape tc;
  auto xv = tc.variable(x[0]);
  auto const five = dc::kernel(
      [](auto a, auto b, auto c, auto d, auto e) { return dc::sigmoid(a) * b + c * d - e; });
  auto y = dc::fused(five, xv, x[1], x[2], x[3], x[4]);
  CHECK(tc.node_count() == 1);
  CHECK(tc.saved_bytes() == n * sizeof(float));
  tc.backward(dc::sum(dc::cast<float>(y)));
  auto const gx = doubles(xv.grad());
  auto const xs = doubles(x[0]), bs = doubles(x[1]);
  for (std::size_t j = 0; j < n; ++j) { // d y / d a = sigmoid'(a) b
    double const sg = 1 / (1 + std::exp(-xs[j]));
    double const r = sg * (1 - sg) * bs[j];
    CHECK(std::abs(gx[j] - r) <= 2 * unit_roundoff<T16>() * std::abs(r) + 1e-6);
  }
}

// matmul of two 16-bit matrices: one node keeping the 16-bit operands, not float copies.
template <class T16> void matmul_memory() {
  dc::tape tp;
  auto a = tp.variable(as_tensor<T16>({16, 32}, exact16<T16>(16 * 32, 70, -1.0, 1.0)));
  auto b = tp.variable(as_tensor<T16>({32, 8}, exact16<T16>(32 * 8, 71, -1.0, 1.0)));
  auto c = dc::matmul(a, b);
  static_assert(std::is_same_v<decltype(c), dc::var<T16>>);
  CHECK(tp.node_count() == 1);
  CHECK(tp.saved_bytes() == (16 * 32 + 32 * 8) * sizeof(T16));
  // batched and 1-D: one node each too, keeping the 16-bit operands
  dc::tape tb;
  auto x = tb.variable(as_tensor<T16>({4, 16, 32}, exact16<T16>(4 * 16 * 32, 72, -1.0, 1.0)));
  auto b2 = tb.variable(as_tensor<T16>({32, 8}, exact16<T16>(32 * 8, 73, -1.0, 1.0)));
  auto w = tb.variable(as_tensor<T16>({32}, exact16<T16>(32, 74, -1.0, 1.0)));
  auto c2 = tb.variable(as_tensor<T16>({32, 8}, exact16<T16>(32 * 8, 75, -1.0, 1.0)));
  auto xb = dc::matmul(x, b2);
  auto wc = dc::matmul(w, c2);
  static_assert(std::is_same_v<decltype(xb), dc::var<T16>>);
  static_assert(std::is_same_v<decltype(wc), dc::var<T16>>);
  CHECK(xb.dims() == dc::shape{4, 16, 8});
  CHECK(wc.dims() == dc::shape{8});
  CHECK(tb.node_count() == 2);
  CHECK(tb.saved_bytes() == (4 * 16 * 32 + 2 * 32 * 8 + 32) * sizeof(T16));
}

TEST_CASE("16-bit tape: the fused node reads 16-bit storage and keeps no float copies") {
  SUBCASE("matmul bfloat16") { matmul_memory<dc::bfloat16>(); }
  SUBCASE("matmul half") { matmul_memory<dc::half>(); }
  SUBCASE("bfloat16") { native_node_memory<dc::bfloat16>(); }
  SUBCASE("half") { native_node_memory<dc::half>(); }
}

// sum, mean and the softmax family over 16-bit variables: ONE node each, reading the 16 bits and
// computing in float (no cast nodes, no float copy of the input); the result is the float
// operation's on the widened input, rounded once (one 16-bit rounding apart at most: the sums
// run in the float sum's order on the CPU). Memory kept for backward: nothing for sum / mean;
// the 16-bit input (here the variable's own storage) and one float per row for the softmax
// family, against a float copy of the result (4 bytes per element) on the cast-node path.
template <class T16> void reductions_read_16_bits() {
  dc::shape const s{6, 40};
  auto const x16 = as_tensor<T16>(s, exact16<T16>(s.size(), 80, -4.0, 4.0));
  auto const near = [](dc::var<T16> const &a, dc::var<float> const &b) {
    auto const av = doubles(a.value()), bv = doubles(b.value());
    REQUIRE(av.size() == bv.size());
    for (std::size_t j = 0; j < av.size(); ++j)
      CHECK(std::abs(av[j] - bv[j]) <= unit_roundoff<T16>() * std::abs(bv[j]));
  };
  auto const n = std::size_t(s.size());
  for (int op = 0; op < 5; ++op) {
    CAPTURE(op);
    auto const f = [op](auto const &v) {
      using V = std::remove_cvref_t<decltype(v)>;
      switch (op) {
      case 0:
        return V(dc::sum(v, {1}));
      case 1:
        return V(dc::mean(v, {0}));
      case 2:
        return V(dc::softmax(v, 1));
      case 3:
        return V(dc::log_softmax(v, 1));
      default:
        return V(dc::logsumexp(v, 1));
      }
    };
    dc::tape tp;
    auto x = tp.variable(x16);
    dc::var<T16> const y = f(x);
    CHECK(tp.node_count() == 1);
    CHECK(tp.saved_bytes() == (op < 2 ? 0 : n * sizeof(T16) + 6 * sizeof(float)));
    dc::tape tf;
    near(y, f(tf.variable(dc::cast<float>(x16))));
    if (op >= 2) { // the cast-node path keeps float copies: the old route's memory
      dc::tape tc;
      auto xc = tc.variable(x16);
      dc::var<T16> const yc = dc::cast<T16>(f(dc::cast<float>(xc)));
      CHECK(yc.dims() == y.dims());
      CHECK(tc.node_count() == 3);
      CHECK(tc.saved_bytes() >= n * sizeof(float));
    }
  }
}

TEST_CASE("16-bit tape: sum, mean and the softmax family read 16 bits, one node, no float copy") {
  SUBCASE("bfloat16") { reductions_read_16_bits<dc::bfloat16>(); }
  SUBCASE("half") { reductions_read_16_bits<dc::half>(); }
}

// The tape's accumulation of a 16-bit gradient over broadcast dimensions (accumulate_grad) reads
// the 16 bits and sums in float: the float sum of the widened gradient, rounded once (and a
// second accumulation adds in float, rounded once more).
template <class T16> void broadcast_accumulation() {
  dc::shape const gs{300, 70};
  auto const g = as_tensor<T16>(gs, exact16<T16>(gs.size(), 90, -1.0, 1.0));
  auto const gf = dc::cast<float>(g);
  auto ref = dc::tensor<float>::empty(dc::shape{70});
  dc::detail::backend_reduce(dc::detail::hook{}, dc::cpu{}, gs, gf.data(), ref.raw_view(), false);
  for (int times = 1; times <= 2; ++times) {
    auto s = dc::detail::make_slot<T16>();
    s->dims = dc::shape{70};
    s->dev = g.dev();
    for (int t = 0; t < times; ++t)
      dc::detail::accumulate_grad(*s, g, dc::cpu{});
    auto const got = doubles(s->grad.get());
    auto const r = doubles(ref);
    for (std::size_t i = 0; i < r.size(); ++i) {
      float const once = float(T16(float(r[i])));
      CHECK(got[i] == double(times == 1 ? once : float(T16(once + once))));
    }
  }
}

TEST_CASE("16-bit tape: a gradient summed over broadcast dimensions: 16 bits read, float sum") {
  SUBCASE("bfloat16") { broadcast_accumulation<dc::bfloat16>(); }
  SUBCASE("half") { broadcast_accumulation<dc::half>(); }
}

TEST_CASE("16-bit tape: a bfloat16 leaf's gradient accumulates over backwards -- zero_grad") {
  auto xs = exact16<dc::bfloat16>(6, 51, -1.0, 1.0);
  dc::tape tp;
  auto x = tp.variable(as_tensor<dc::bfloat16>({2, 3}, xs));
  auto twice = [&] { tp.backward(dc::sum(dc::cast<float>(x * x))); };
  twice();
  twice();
  auto g = doubles(x.grad());
  for (std::size_t i = 0; i < xs.size(); ++i) // 2 * (2 x), exact in bfloat16 (a power of 2 times x)
    CHECK(g[i] == 4 * xs[i]);
  tp.zero_grad();
  for (double v : doubles(x.grad()))
    CHECK(v == 0.0);
}

TEST_CASE("loss_scaler: overflow skips the step and halves the scale -- growth -- unscaled grads") {
  auto ws = exact16<dc::half>(8, 41, -1.0, 1.0);
  auto xs = exact16<dc::half>(8, 42, 0.25, 1.0); // (|x| >= 1/4: x 2^-10 is a normal half)
  dc::tape tp;
  dc::parameters<float> ps;
  auto w = ps.add("w", tp.variable(as_tensor<float>({8}, ws)));
  dc::sgd opt(ps, {.lr = 0.5});
  dc::loss_scaler<float> scaler(ps, {.init_scale = 1024.0, .growth_interval = 3});
  auto xh = as_tensor<dc::half>({8}, xs);
  auto run = [&](float factor) { // loss = sum(half(w) * x) * factor, in half
    auto loss = dc::sum(dc::cast<dc::half>(w) * xh * factor);
    scaler.backward(tp, loss);
  };
  SUBCASE("unscaled gradients equal the float gradients") {
    run(1.0f);
    REQUIRE(scaler.unscale());
    auto const g = w.grad().to_vector();
    // d loss / d w = x, exact in half, scaled by 1024 and back: exact.
    for (std::size_t i = 0; i < xs.size(); ++i)
      CHECK(g[i] == float(xs[i]));
    auto const before = w.value().to_vector();
    CHECK(scaler.step(opt));
    auto const after = w.value().to_vector();
    for (std::size_t i = 0; i < xs.size(); ++i)
      CHECK(after[i] == doctest::Approx(before[i] - 0.5f * float(xs[i])));
    CHECK(scaler.scale() == 1024.0);
  }
  SUBCASE("a forced overflow skips the step and halves the scale") {
    run(1000.0f); // 1000 * 1024 * |x| > 65504: the half gradients are inf
    auto const before = w.value().to_vector();
    CHECK_FALSE(scaler.step(opt));
    CHECK(w.value().to_vector() == before);
    CHECK(scaler.scale() == 512.0);
    CHECK(scaler.skipped() == 1);
    CHECK(opt.step_count() == 0);
  }
  SUBCASE("the scale grows after growth_interval good steps") {
    for (int k = 0; k < 3; ++k) {
      CHECK(scaler.scale() == 1024.0);
      tp.zero_grad();
      tp.clear();
      run(1.0f);
      CHECK(scaler.step(opt));
    }
    CHECK(scaler.scale() == 2048.0);
  }
  SUBCASE("without scaling, small half gradients underflow; the scaler recovers them") {
    // d loss / d w = x 2^-20 is a subnormal half with 4 bits or fewer (the smallest is 2^-24);
    // scaled by 2^10 it is a normal half, within half's roundoff.
    auto small = [&](double s) {
      tp.zero_grad();
      tp.clear();
      auto loss = dc::sum(dc::cast<dc::half>(w) * xh * float(std::ldexp(1.0, -20)));
      tp.backward(std::vector<dc::var<dc::half>>{loss},
                  std::vector<dc::tensor<dc::half>>{
                      dc::tensor<dc::half>::full(dc::shape{}, dc::half(float(s)))});
      auto g = w.grad().to_vector();
      double worst = 0;
      for (std::size_t i = 0; i < xs.size(); ++i)
        worst = std::max(worst, std::abs(g[i] / s - xs[i] * std::ldexp(1.0, -20)) /
                                    std::abs(xs[i] * std::ldexp(1.0, -20)));
      return worst;
    };
    CHECK(small(1.0) > 0.01);                  // unscaled: most bits (or all) lost
    CHECK(small(1024.0) <= 3.0 / 2048 + 1e-9); // scaled: half's roundoff
  }
}

TEST_CASE("loss_scaler: bad options are refused") {
  dc::parameters<float> ps;
  CHECK_THROWS_AS(dc::loss_scaler<float>(ps, {.init_scale = 0.0}), dc::error);
  CHECK_THROWS_AS(dc::loss_scaler<float>(ps, {.backoff_factor = 1.5}), dc::error);
}

// The char-LSTM demo (examples/models/char_lstm.hpp) trained in float32 and with its LSTM in
// bfloat16 (and in half under the loss scaler), from one initialisation on the same batches: the
// 16-bit runs' loss on held-out batches (evaluated in float32) is within 5 % of the float32 run's
// (issue 37's target).
template <class S> double char_lstm_loss(int steps, bool scaled) {
  using namespace char_lstm;
  vocabulary const voc(corpus);
  dc::tape tp;
  model<float> m(tp, voc.size(), 32, 42);
  dc::adam opt(m.ps, {.lr = 1e-2});
  dc::loss_scaler<float> scaler(m.ps,
                                {.init_scale = 1024.0, .growth_interval = 50, .enabled = scaled});
  std::mt19937_64 rng(1);
  for (int it = 0; it < steps; ++it) {
    window_batch wb = sample_batch(voc, 8, 16, rng);
    if constexpr (std::is_same_v<S, float>) {
      tp.backward(loss_of(tp, m, wb));
      opt.step();
    } else {
      scaler.backward(tp, loss_of_16<S>(tp, m, wb));
      scaler.step(opt);
    }
    tp.zero_grad();
    tp.clear();
  }
  std::mt19937_64 held(99);
  double total = 0;
  dc::no_grad off(tp);
  for (int k = 0; k < 4; ++k)
    total += double(loss_of(tp, m, sample_batch(voc, 8, 16, held)).item()) / 4;
  return total;
}

TEST_CASE("char-LSTM in bfloat16 / half (loss scaler): within 5 % of the float32 loss") {
  int const steps = 120;
  double const f32 = char_lstm_loss<float>(steps, false);
  double const bf16 = char_lstm_loss<dc::bfloat16>(steps, false);
  double const f16 = char_lstm_loss<dc::half>(steps, true);
  MESSAGE("held-out loss after " << steps << " steps: float32 " << f32 << ", bfloat16 " << bf16
                                 << ", half (scaled) " << f16);
  CHECK(f32 < 2.5); // it learned (the initial loss is log(vocabulary) = 3.3)
  CHECK(std::abs(bf16 - f32) <= 0.05 * f32);
  CHECK(std::abs(f16 - f32) <= 0.05 * f32);
}
