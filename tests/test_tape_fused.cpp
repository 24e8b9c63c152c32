// Tests of the tape's elementwise side (dualcast/ops/elementwise.hpp): every operator and math
// function against central finite differences in double precision (broadcast shapes,
// non-contiguous views, scalars), the fused node: store == recompute == unfused == finite
// differences on random compositions, branches, constants, the cost model and tape memory per
// policy, and an LSTM cell step with matmuls in every variant. The other operations and the
// tape's semantics are tested in test_tape.cpp (split for compile time).
#include <dualcast/autodiff.hpp>
#include <dualcast/dualcast.hpp>

#include <doctest/doctest.h>

#include "tape_support.hpp"

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace tape_support;

// ---- elementwise
// ----------------------------------------------------------------------------------
TEST_CASE("elementwise: binary operators with broadcasting and scalars match finite differences") {
  auto a = random_tensor({3, 4}, 1), b = random_tensor({4}, 2, 0.5, 1.5),
       c = random_tensor({3, 1}, 3, 0.5, 1.5);
  check_gradients([](auto const &v) { return v[0] + v[1]; }, {a, b});
  check_gradients([](auto const &v) { return v[0] - v[1]; }, {a, c});
  check_gradients([](auto const &v) { return v[0] * v[1]; }, {b, c});
  check_gradients([](auto const &v) { return v[0] / v[1]; }, {a, c});
  check_gradients([](auto const &v) { return dc::pow(v[1], v[0]); }, {a, b});
  check_gradients([](auto const &v) { return 2.0 * v[0] - v[1] / 3.0 + 1.0; }, {a, b});
  check_gradients([](auto const &v) { return 1.5 / v[0] - (-v[0]); }, {b});
  check_gradients([](auto const &v) { return v[0] * v[0]; }, {a}); // the same variable twice
}

TEST_CASE("elementwise: math functions match finite differences") {
  auto x = random_tensor({2, 3}, 4, 0.1, 0.9);
  std::vector<fn> fs = {
      [](auto const &v) { return dc::exp(v[0]); },
      [](auto const &v) { return dc::log(v[0]); },
      [](auto const &v) { return dc::sqrt(v[0]); },
      [](auto const &v) { return dc::sin(v[0]); },
      [](auto const &v) { return dc::cos(v[0]); },
      [](auto const &v) { return dc::tanh(v[0]); },
      [](auto const &v) { return dc::sigmoid(v[0]); },
      [](auto const &v) { return dc::softplus(v[0]); },
      [](auto const &v) { return dc::atan(v[0]); },
      [](auto const &v) { return dc::log1p(v[0]); },
      [](auto const &v) { return dc::erf(v[0]); },
      [](auto const &v) { return dc::normcdf(v[0]); },
      [](auto const &v) { return dc::relu(v[0] - 0.5); },
      [](auto const &v) { return dc::abs(v[0] - 0.5); },
      [](auto const &v) { return dc::asin(v[0]); },
      [](auto const &v) { return dc::cbrt(v[0]); },
      [](auto const &v) { return dc::expm1(v[0]); },
      [](auto const &v) { return dc::rsqrt(v[0]); },
  };
  for (std::size_t i = 0; i < fs.size(); ++i) {
    INFO("function " << i);
    check_gradients(fs[i], {x});
  }
}

TEST_CASE("elementwise: non-contiguous views and scalar (rank 0) variables") {
  auto a = random_tensor({4, 3}, 5), b = random_tensor({3, 4}, 6), s = T64::scalar(0.7);
  check_gradients([](auto const &v) { return dc::transpose(v[0]) * dc::sin(v[1]); }, {a, b});
  check_gradients([](auto const &v) { return dc::slice(v[0], 0, 1, 4, 2) * v[1]; }, {a, s});
  check_gradients([](auto const &v) { return dc::exp(v[0] * v[1]); }, {s, s});
}

// ---- the fused node
// ---------------------------------------------------------------------------------
namespace {
constexpr auto cell = dc::kernel([](auto a, auto b, auto c) {
  auto t = dc::sigmoid(a) * b + dc::tanh(c);
  return dc::outputs(t * a, dc::exp(-t) * c);
});
constexpr auto branchy =
    dc::kernel([](auto x, auto y) { return dc::select(x > 0.0, x * y, dc::sin(y)); });
} // namespace

TEST_CASE("fused: store == recompute == unfused == finite differences on random compositions") {
  std::mt19937 rng(42);
  shape shapes[][3] = {
      {{3, 4}, {3, 4}, {3, 4}}, {{2, 3, 4}, {4}, {3, 1}}, {{5}, {}, {5}}, {{1, 4}, {3, 1}, {3, 4}}};
  for (auto const &sh : shapes) {
    auto a = random_tensor(sh[0], rng()), b = random_tensor(sh[1], rng()),
         c = random_tensor(sh[2], rng());
    auto run = [&](int mode) {
      dc::tape tp;
      auto va = tp.variable(a), vb = tp.variable(b), vc = tp.variable(c);
      auto z = vb * 2.0; // the fused node consumes an intermediate, too
      std::array<V64, 2> r;
      if (mode == 0)
        r = dc::fused(dc::policy::store, cell, va, z, vc);
      if (mode == 1)
        r = dc::fused(dc::policy::recompute, cell, va, z, vc);
      if (mode == 2)
        r = dc::unfused(cell, va, z, vc);
      if (mode == 3) {
        tp.fused = false;
        r = dc::call(cell, va, z, vc);
      }
      auto loss = dc::sum(weigh(r[0]) + dc::sum(r[1] * r[1]));
      tp.backward(loss);
      return std::vector<std::vector<double>>{
          grads_of(va), grads_of(vb), grads_of(vc), {loss.item()}};
    };
    auto store = run(0), recompute = run(1), unfused = run(2), switched = run(3);
    for (int i = 0; i < 4; ++i) {
      check_close(store[std::size_t(i)], recompute[std::size_t(i)], 1e-12);
      check_close(store[std::size_t(i)], unfused[std::size_t(i)], 1e-12);
      check_close(store[std::size_t(i)], switched[std::size_t(i)], 1e-12);
    }
    check_gradients(
        [](auto const &v) {
          auto r = dc::fused(dc::policy::store, cell, v[0], v[1] * 2.0, v[2]);
          return weigh(r[0]) + dc::sum(r[1] * r[1]);
        },
        {a, b, c});
    // the inputs used again by a later node: backward reaches the store node with their
    // gradients already started, so it accumulates into them
    check_gradients(
        [](auto const &v) {
          auto r = dc::fused(dc::policy::store, cell, v[0], v[1] * 2.0, v[2]);
          return weigh(r[0]) + dc::sum(r[1] * r[1]) + dc::sum(dc::sin(v[0]) * v[2]);
        },
        {a, b, c});
  }
}

TEST_CASE("fused: data-dependent branches, constants and inactive inputs") {
  auto x = random_tensor({4, 5}, 11), y = random_tensor({5}, 12);
  check_gradients([](auto const &v) { return dc::fused(dc::policy::store, branchy, v[0], v[1]); },
                  {x, y});
  check_gradients(
      [](auto const &v) { return dc::fused(dc::policy::recompute, branchy, v[0], v[1]); }, {x, y});
  // A tensor argument is a constant (never dualized); a variable without gradients gets none.
  dc::tape tp;
  auto vx = tp.variable(x), vy = tp.constant(y);
  auto r = dc::fused(dc::policy::store, branchy, vx, vy);
  auto r2 = dc::fused(dc::policy::recompute, branchy, vx, y);
  tp.backward(dc::sum(r + r2));
  CHECK(!vy.grad().defined());
  CHECK(vx.grad().defined());
}

TEST_CASE("fused: the cost model and tape memory per policy") {
  CHECK(dc::detail::store_is_cheaper(1, 1, 1000, 4, 4000));   // sigmoid: store
  CHECK(!dc::detail::store_is_cheaper(1, 2, 1000, 4, 8000));  // x * y: recompute
  CHECK(!dc::detail::store_is_cheaper(2, 5, 1000, 4, 20000)); // LSTM cell: recompute
  auto a = random_tensor({8, 16}, 21);
  auto saved = [&](auto p) {
    dc::tape tp;
    auto va = tp.variable(a), vb = tp.variable(a.clone()), vc = tp.variable(a.clone());
    auto r = dc::fused(p, cell, va, vb, vc);
    return tp.saved_bytes();
  };
  CHECK(saved(dc::policy::store) == 6 * 8 * 16 * sizeof(double));     // K * A partials
  CHECK(saved(dc::policy::recompute) == 3 * 8 * 16 * sizeof(double)); // the inputs only
  // A variable passed twice (x * x of a lazy expression on the CPU): the store node keeps ONE
  // partial array per distinct variable and output, the uses' summed.
  auto saved_twice = [&](auto p) {
    dc::tape tp;
    auto va = tp.variable(a), vc = tp.variable(a.clone());
    auto r = dc::fused(p, cell, va, va, vc);
    return tp.saved_bytes();
  };
  CHECK(saved_twice(dc::policy::store) == 4 * 8 * 16 * sizeof(double));
  CHECK(saved_twice(dc::policy::recompute) == 2 * 8 * 16 * sizeof(double));
  for (bool store : {true, false})
    check_gradients(
        [store](auto const &v) {
          auto [y, z] = store ? dc::fused(dc::policy::store, cell, v[0], v[0], v[1])
                              : dc::fused(dc::policy::recompute, cell, v[0], v[0], v[1]);
          return y * z;
        },
        {a, random_tensor({8, 16}, 22)});
}

namespace {
constexpr auto lstm_cell = dc::kernel([](auto i, auto f, auto g, auto o, auto c) {
  auto c2 = dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g);
  return dc::outputs(dc::sigmoid(o) * dc::tanh(c2), c2);
});
}

// ---- flat nodes: every array argument contiguous with the call's shape ------------------------
// (ops/fused/recompute_node.hpp: checked and run on pointers, not views.) Their gradients are the
// bits the view path gives for the same values laid out with strides, and central differences'.
namespace {
constexpr auto two_out = dc::kernel(
    [](auto a, auto b, auto c) { return dc::outputs(dc::tanh(a * b + c), a * dc::exp(b) - c); });
// x's elements at the even columns of a tensor twice as wide: the same values, strided.
T64 spread(T64 const &x) {
  T64 w = random_tensor({x.dims()[0], 2 * x.dims()[1]}, 99);
  for (dc::index_t i = 0; i < x.dims()[0]; ++i)
    for (dc::index_t j = 0; j < x.dims()[1]; ++j)
      w(i, 2 * j) = double(x(i, j));
  return w;
}
// A chain of recompute nodes: a variable passed twice, an output nobody uses (a zero cotangent),
// a variable used by several nodes (its gradient added to), a constant.
V64 flat_chain(std::vector<V64> const &v, T64 const &constant) {
  auto [h, c] = dc::fused(dc::policy::recompute, two_out, v[0], v[1], v[2]);
  auto [h2, unused] = dc::fused(dc::policy::recompute, two_out, h, c, v[0]);
  auto [h3, c3] = dc::fused(dc::policy::recompute, two_out, h2, h2, constant);
  (void)unused;
  return weigh(h3 * c3 + v[1]);
}
} // namespace

TEST_CASE("fused: flat nodes give the strided path's bits and central differences' gradients") {
  auto x = random_tensor({3, 5}, 41), y = random_tensor({3, 5}, 42), z = random_tensor({3, 5}, 43),
       k = random_tensor({3, 5}, 44);
  check_gradients([&](auto const &v) { return flat_chain(v, k); }, {x, y, z});
  auto grads = [&](bool strided) {
    dc::tape tp;
    std::vector<V64> vars, args;
    for (auto const &t : {x, y, z}) {
      vars.push_back(tp.variable(strided ? spread(t) : t.clone()));
      args.push_back(strided ? dc::slice(vars.back(), 1, 0, 10, 2) : vars.back());
    }
    tp.backward(flat_chain(args, k));
    std::vector<double> g;
    for (auto const &v : vars) {
      T64 gv = strided ? v.grad().slice(1, 0, 10, 2).contiguous() : v.grad();
      auto e = gv.to_vector();
      g.insert(g.end(), e.begin(), e.end());
    }
    return g;
  };
  auto flat = grads(false), strided = grads(true);
  CHECK(flat.size() == 45);
  CHECK(same_bits(flat, strided));
}

TEST_CASE("fused: a flat node whose gradient is strided, and one whose input is a gradient") {
  // A column of a transposed variable is contiguous, its gradient (a column of a row-major
  // gradient) is not: the node is flat, its backward takes the view path.
  auto base = random_tensor({3, 4}, 45), y = random_tensor({4, 1}, 46);
  check_gradients(
      [](auto const &v) {
        auto col = dc::slice(dc::transpose(v[0]), 1, 1, 2); // (4, 1), contiguous
        auto [h, c] = dc::fused(dc::policy::recompute, two_out, col, v[1], v[1]);
        return h * c;
      },
      {base, y});
}

TEST_CASE("fused: the flat checks reject what the view checks reject, with their messages") {
  // (A tape's backward gives each node fresh or accumulated gradients, never its inputs' memory;
  // the checks guard the seam all the same, so they are tested on it directly.)
  std::vector<double> buf(12, 1.0);
  double *p = buf.data();
  double const *in[2] = {p, p + 6};
  int const pos[2] = {0, 2};
  dc::index_t const len = 4;
  auto messages = [&](double *const *xv, std::size_t nx, double const *const *yv,
                      dc::index_t const *ys, std::size_t k) {
    std::string flat, views;
    try {
      dc::detail::check_flat_vjp("op", in, pos, 2, xv, nx, yv, ys, k, len);
    } catch (dc::aliasing_error const &e) {
      flat = e.what();
    }
    std::vector<dc::view<double const>> iv{{in[0], {len}}, {in[1], {len}}};
    std::vector<dc::view<double>> xvv;
    std::vector<dc::view<double const>> yvv;
    for (std::size_t i = 0; i < nx; ++i)
      xvv.emplace_back(xv[i], dc::shape{len});
    for (std::size_t j = 0; j < k; ++j)
      yvv.push_back(ys[j] == 1 ? dc::view<double const>(yv[j], {len})
                               : dc::view<double const>(yv[j], {len}, {0}));
    int const active[2] = {0, 2};
    bool direct[2];
    try {
      dc::detail::check_vjp("op", iv.data(), pos, 2, active, xvv.data(), nx, yvv.data(), k, direct);
    } catch (dc::aliasing_error const &e) {
      views = e.what();
    }
    CHECK(flat == views);
    return flat;
  };
  std::vector<double> other(12);
  double *q = other.data();
  dc::index_t const one[1] = {1}, zero_stride[1] = {0};
  double const *y_ok[1] = {q + 8};
  double *fine[2] = {q, q + 4};
  CHECK(messages(fine, 2, y_ok, one, 1).empty());
  double *same_as_input[2] = {p, q}; // in place: the same elements
  CHECK(messages(same_as_input, 2, y_ok, one, 1).empty());
  double *shifted[2] = {q, p + 1}; // overlaps argument 0 shifted by one
  CHECK(messages(shifted, 2, y_ok, one, 1).find("overlaps argument 0") != std::string::npos);
  double *each_other[2] = {q, q + 2};
  CHECK(messages(each_other, 2, y_ok, one, 1).find("overlaps input cotangent 0") !=
        std::string::npos);
  double const *y_zero[1] = {q + 5}; // a broadcast zero inside input cotangent 1
  double *over_y[2] = {q, q + 4};
  CHECK(messages(over_y, 2, y_zero, zero_stride, 1).find("overlaps output cotangent 0") !=
        std::string::npos);
  // outputs of a flat call
  double *outs_bad[2] = {q, p + 7};
  std::string msg;
  try {
    dc::detail::check_flat_call("op", in, pos, 2, outs_bad, 2, len);
  } catch (dc::aliasing_error const &e) {
    msg = e.what();
  }
  CHECK(msg == "op: output 1 overlaps argument 2 without being the same elements; write to "
               "separate memory");
  double *outs_ok[2] = {q, p + 6};
  CHECK_NOTHROW(dc::detail::check_flat_call("op", in, pos, 2, outs_ok, 2, len));
}

TEST_CASE("fused: the flat write check's vector pass answers as every pair does") {
  // flat_writes_meet keeps intervals four to a vector, padded with empty ones: random sets (some
  // sizes not a multiple of four, empty arrays, broadcast cotangents, writes equal to an input)
  // against the rule applied to each pair, with and without the write-write pairs.
  std::mt19937 rng(7);
  std::vector<double> buf(80);
  auto at = [&] { return buf.data() + rng() % 72; };
  int met = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::size_t const n = rng() % 14, k = rng() % 3, n_w = rng() % 12;
    dc::index_t const len = dc::index_t(rng() % 4);
    std::vector<double const *> v(n), yv(k);
    std::vector<double *> w(n_w);
    std::vector<dc::index_t> ys(k);
    for (auto &p : v)
      p = at();
    for (std::size_t j = 0; j < k; ++j)
      yv[j] = at(), ys[j] = dc::index_t(rng() % 2);
    for (auto &p : w)
      p = rng() % 4 == 0 && n > 0 ? const_cast<double *>(v[rng() % n]) : at();
    auto pairs = [&](bool apart) {
      bool any = false;
      for (std::size_t i = 0; i < n_w; ++i) {
        auto const r = dc::detail::flat_interval_of<double>(w[i], len);
        for (std::size_t j = 0; j < i && !apart; ++j)
          any |= dc::detail::flat_write_breaks(r, dc::detail::flat_interval_of<double>(w[j], len),
                                               0) != 0;
        for (std::size_t a = 0; a < n; ++a)
          any |= dc::detail::flat_write_breaks(r, dc::detail::flat_interval_of(v[a], len), 1) != 0;
        for (std::size_t j = 0; j < k; ++j)
          any |= dc::detail::flat_write_breaks(r, dc::detail::flat_interval_of(yv[j], len, ys[j]),
                                               ys[j] == 1) != 0;
      }
      return any;
    };
    for (bool apart : {false, true}) {
      bool const expect = pairs(apart);
      met += expect ? 1 : 0;
      CHECK(dc::detail::flat_writes_meet<double>(v.data(), n, w.data(), n_w, yv.data(), ys.data(),
                                                 k, len, apart) == expect);
    }
  }
  CHECK(met > 500); // (both answers drawn often)
  CHECK(met < 5500);
}

TEST_CASE("fused: among answers as the plain search does") {
  // detail::among (four pointers to a compare, then the rest one by one): every length up to 21,
  // the pointer sought at each place, twice, and absent.
  std::vector<double> buf(32);
  std::vector<double const *> p;
  for (auto const &x : buf)
    p.push_back(&x);
  for (std::size_t n = 0; n <= 21; ++n) {
    for (std::size_t at = 0; at <= n; ++at) {
      std::vector<double const *> q(p.begin(), p.begin() + std::ptrdiff_t(n));
      double const *x = at < n ? q[at] : &buf[31]; // (at == n: absent)
      CHECK(dc::detail::among(q.data(), n, x) == (at < n));
      if (at < n && n > 1) {
        q[(at + 1) % n] = x; // twice
        CHECK(dc::detail::among(q.data(), n, x));
      }
    }
    CHECK(!dc::detail::among(p.data(), n, static_cast<double const *>(nullptr)));
  }
}

TEST_CASE("fused: a flat node whose gradients share memory") {
  // Rows 0-39 and rows 1-40 of one variable: contiguous views of the call's shape (a flat node)
  // whose gradients overlap shifted by a row, so the second must go through a temporary (written
  // in place, the pass's next chunk of 64 elements would overwrite what it added); a variable
  // with a view of all of it (the same elements); a variable passed twice.
  auto x = random_tensor({41, 5}, 47), y = random_tensor({40, 5}, 48);
  check_gradients(
      [](auto const &v) {
        auto up = dc::slice(v[0], 0, 0, 40), down = dc::slice(v[0], 0, 1, 41);
        auto [h, c] = dc::fused(dc::policy::recompute, two_out, up, down, v[1]);
        return h * c;
      },
      {x, y});
  check_gradients(
      [](auto const &v) {
        auto whole = dc::slice(v[1], 0, 0, 40);
        auto [h, c] = dc::fused(dc::policy::recompute, two_out, v[1], whole, v[1]);
        return h * c + dc::sum(v[0] * v[0]);
      },
      {x, y});
}

TEST_CASE("fused: backward marks the gradients it allocates, a nested backward its own") {
  // A flat node's backward compares with its arguments only the gradients that the running
  // backward did not allocate (grad_tensor::made_by, check_flat_targets): those it allocated --
  // a leaf's, a view's slice of its base's -- carry its serial; a backward run from a hook has
  // a serial of its own, and the outer one's comes back after it; outside backward there is none.
  using dc::detail::running_backward;
  CHECK(running_backward() == 0);
  dc::tape tp;
  auto w = tp.variable(random_tensor({3, 5}, 51)), base = tp.variable(random_tensor({6, 5}, 52));
  auto top = dc::slice(base, 0, 0, 3); // a view variable: its gradient a slice of base's
  std::uint64_t outer = 0, w_made = 0, base_made = 0, top_made = 1, inner = 0, after = 0;
  tp.on_gradient_ready(w, [&] {
    outer = running_backward();
    w_made = w.slot()->grad.made_by();
    top_made = top.slot()->grad.made_by();
    dc::tape other;
    auto u = other.variable(random_tensor({4}, 53));
    other.on_gradient_ready(u, [&] { inner = running_backward(); });
    other.backward(dc::sum(u * u));
    after = running_backward();
  });
  tp.on_gradient_ready(base, [&] { base_made = base.slot()->grad.made_by(); });
  auto [h, c] = dc::fused(dc::policy::recompute, two_out, w, top, w);
  tp.backward(dc::sum(h * c));
  CHECK(outer != 0);
  CHECK(w_made == outer);
  CHECK(base_made == outer);
  CHECK(top_made == outer);
  CHECK(inner != 0);
  CHECK(inner != outer);
  CHECK(after == outer);
  CHECK(running_backward() == 0);
  // A gradient assigned otherwise (here: a tensor given to the slot) is not marked.
  dc::detail::grad_tensor<double> g;
  g = random_tensor({2}, 54);
  CHECK(g.made_by() == 0);
  g.made(random_tensor({2}, 55), 7);
  CHECK(g.made_by() == 7);
  g = random_tensor({2}, 56);
  CHECK(g.made_by() == 0);
}

TEST_CASE("an LSTM cell step with matmuls: all variants match finite differences") {
  const dc::index_t B = 3, I = 4, H = 2;
  auto X = random_tensor({B, I}, 121), H0 = random_tensor({B, H}, 122),
       C0 = random_tensor({B, H}, 123), Wx = random_tensor({I, 4 * H}, 124),
       Wh = random_tensor({H, 4 * H}, 125), bias = random_tensor({4 * H}, 126);
  // Modes 3-5: the same with compile-time sparse partials (kernel/kernel.hpp, sparse_partials).
  constexpr auto sparse_cell = dc::sparse_partials(lstm_cell);
  for (int mode = 0; mode < 6; ++mode) {
    INFO("mode " << mode);
    check_gradients(
        [mode, sparse_cell](auto const &v) {
          auto gates = dc::matmul(v[0], v[3]) + dc::matmul(v[1], v[4]) + v[5];
          auto gate = [&](int k) { return dc::slice(gates, 1, k * H, (k + 1) * H); };
          std::array<V64, 2> r;
          if (mode == 0)
            r = dc::fused(dc::policy::store, lstm_cell, gate(0), gate(1), gate(2), gate(3), v[2]);
          if (mode == 1)
            r = dc::fused(dc::policy::recompute, lstm_cell, gate(0), gate(1), gate(2), gate(3),
                          v[2]);
          if (mode == 2)
            r = dc::unfused(lstm_cell, gate(0), gate(1), gate(2), gate(3), v[2]);
          if (mode == 3)
            r = dc::fused(dc::policy::store, sparse_cell, gate(0), gate(1), gate(2), gate(3), v[2]);
          if (mode == 4)
            r = dc::fused(dc::policy::recompute, sparse_cell, gate(0), gate(1), gate(2), gate(3),
                          v[2]);
          if (mode == 5)
            r = dc::unfused(sparse_cell, gate(0), gate(1), gate(2), gate(3), v[2]);
          return weigh(r[0]) + weigh(r[1]);
        },
        {X, H0, C0, Wx, Wh, bias});
  }
}
