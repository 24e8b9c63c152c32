// Tests of the lazy elementwise expressions (dualcast/ops/expression.hpp): separate elementwise
// calls on tape variables become ONE fused node with gradients equal to the node-by-node
// (unfused) result and to central finite differences in double precision; broadcasting leaves,
// constant tensors, scalars, a leaf used twice (one partial array), materialisation by matmul / sum
// / backward, several outputs as one node (an LSTM cell written with plain operators), leaf version
// checks.
#include <dualcast/autodiff.hpp>
#include <dualcast/dualcast.hpp>

#include <doctest/doctest.h>

#include "tape_support.hpp"

#include <functional>
#include <random>
#include <type_traits>
#include <vector>

using namespace tape_support;

namespace {

// Gradients of weigh(f(xs)) on a tape (fused or not) and the number of nodes f recorded.
struct run_result {
  std::vector<std::vector<double>> grads;
  std::size_t nodes;
  double value;
};
run_result run(fn const &f, std::vector<T64> const &xs, bool fused) {
  dc::tape tp;
  tp.fused = fused;
  std::vector<V64> vs;
  for (auto const &x : xs)
    vs.push_back(tp.variable(x.clone()));
  V64 y = f(vs);
  std::size_t nodes = tp.node_count();
  V64 loss = weigh(y);
  tp.backward(loss);
  run_result r{{}, nodes, loss.item()};
  for (auto const &v : vs)
    r.grads.push_back(v.grad().defined() ? v.grad().to_vector()
                                         : std::vector<double>(std::size_t(v.size()), 0.0));
  return r;
}

// Fused gradients == unfused gradients == central differences; returns the fused run.
run_result check_all(fn const &f, std::vector<T64> const &xs, double tol = 1e-6) {
  auto a = run(f, xs, true), b = run(f, xs, false);
  CHECK(a.value == doctest::Approx(b.value).epsilon(1e-12));
  for (std::size_t i = 0; i < xs.size(); ++i) {
    for (dc::index_t j = 0; j < xs[i].size(); ++j) {
      double fd = central_difference(f, xs, i, j);
      INFO("input " << i << " element " << j);
      CHECK(a.grads[i][std::size_t(j)] ==
            doctest::Approx(b.grads[i][std::size_t(j)]).epsilon(1e-12));
      CHECK(a.grads[i][std::size_t(j)] == doctest::Approx(fd).epsilon(tol).scale(1.0));
    }
  }
  return a;
}

} // namespace

TEST_CASE("lazy: a chain of separate elementwise calls is ONE fused node") {
  auto a = random_tensor({3, 4}, 1), b = random_tensor({3, 4}, 2), c = random_tensor({3, 4}, 3);
  auto r = check_all(
      [](auto const &v) {
        auto t1 = dc::sigmoid(v[0]); // 1
        auto t2 = t1 * v[1];         // 2
        auto t3 = t2 + v[2];         // 3
        auto t4 = dc::tanh(t3);      // 4
        auto t5 = t4 - v[0] / v[2];  // 5, 6
        auto t6 = dc::exp(-t5) * t1; // 7, 8 (t1 used again)
        return V64(t6);              // materialised here
      },
      {a, b, c});
  CHECK(r.nodes == 1);
  // Unfused, the same code records one node per operation; t1 (used twice) is evaluated once.
  auto u = run(
      [](auto const &v) {
        auto t1 = dc::sigmoid(v[0]);
        return V64(dc::exp(-(dc::tanh(t1 * v[1] + v[2]) - v[0] / v[2])) * t1);
      },
      {a, b, c}, false);
  CHECK(u.nodes == 9);
}

TEST_CASE("lazy: rsqrt fused == unfused == central differences, with a broadcast operand") {
  auto a = random_tensor({3, 4}, 11), b = random_tensor({4}, 12);
  auto r = check_all(
      [](auto const &v) { return V64(dc::rsqrt(v[0] * v[0] + v[1] * v[1] + 0.25) * v[1]); },
      {a, b});
  CHECK(r.nodes == 1);
}

TEST_CASE("lazy: operands that are temporaries give up their leaves, named ones keep theirs") {
  // join moves the leaves out of a temporary operand (each level of sigmoid(x * w + b)) and
  // copies a named one's: a named expr and a named variable used in several operators stay whole.
  auto a = random_tensor({3, 4}, 41), b = random_tensor({3, 4}, 42), c = random_tensor({4}, 43);
  auto k = random_tensor({3, 4}, 44); // a constant tensor leaf, in a named expr and a temporary
  auto r = check_all(
      [k](auto const &v) {
        auto e = v[0] * v[1] + k;                                // named: copied by each use
        auto g = dc::sigmoid(e + v[2]) * dc::tanh(e - k * v[2]); // temporaries: moved
        V64 h = g * e;                                           // e's leaves still there
        return V64(dc::sin(V64(h * 2.0)) * h + dc::exp(e) / (2.0 + v[1] * v[1])); // var temporary
      },
      {a, b, c});
  CHECK(r.nodes == 3);
  dc::tape tp;
  auto x = tp.variable(a), y = tp.variable(b);
  auto e = x * y + k;
  auto f = dc::tanh(e) * e - e; // e used three times (copied), the inner temporaries moved
  CHECK((x.requires_grad() && y.requires_grad())); // (named variables: copied, not moved)
  CHECK(e.vars[0].slot() == x.slot());
  CHECK(e.vars[1].slot() == y.slot());
  CHECK(e.tensors[0].data() == k.data());
  CHECK(f.vars.size() == 6);
  for (auto const &v : f.vars)
    CHECK((v.slot() == x.slot() || v.slot() == y.slot()));
  CHECK(f.tensors[0].data() == k.data());
  CHECK(f.tensors[2].data() == k.data());
}

TEST_CASE("lazy: nothing is recorded before materialisation -- eval() is cached") {
  dc::tape tp;
  auto x = tp.variable(random_tensor({5}, 4));
  auto e = dc::sin(x) * 2.0 + dc::cos(x);
  CHECK(tp.node_count() == 0);
  static_assert(dc::is_expr_v<decltype(e)>);
  static_assert(std::is_trivially_copyable_v<decltype(e.tree)>);
  CHECK(e.dims() == shape{5});
  V64 v1 = e.eval();
  V64 v2 = e; // the same variable: no second node
  CHECK(tp.node_count() == 1);
  CHECK(v1.slot() == v2.slot());
}

TEST_CASE("lazy: broadcasting leaves and constant tensors") {
  auto a = random_tensor({2, 3, 4}, 5), b = random_tensor({4}, 6, 0.5, 1.5),
       c = random_tensor({3, 1}, 7, 0.5, 1.5);
  auto k = random_tensor({3, 4}, 8); // a constant tensor leaf
  auto r = check_all(
      [k](auto const &v) { return V64(dc::log(v[1] * v[2]) * v[0] + k * dc::tanh(v[0]) - k); },
      {a, b, c});
  CHECK(r.nodes == 1);
  dc::tape tp;
  auto x = tp.variable(a), y = tp.variable(random_tensor({5}, 9));
  CHECK_THROWS_AS(x * y, dc::shape_error); // reported when the expression is built
}

TEST_CASE("lazy: the same leaf used twice is one input") {
  auto a = random_tensor({4, 3}, 10, 0.2, 0.9);
  auto r = check_all([](auto const &v) { return V64(v[0] * v[0] + dc::sin(v[0]) * v[0]); }, {a});
  CHECK(r.nodes == 1);
  // The leaves are passed as they are (three inputs here, one variable; ONE instantiation of the
  // node per expression), small or large: recompute saves x; store ONE partial array, the three
  // uses' summed, not three.
  auto big = random_tensor({65, 64}, 10, 0.2, 0.9);
  auto run = [&](dc::tensor<double> const &x0, auto pol) {
    dc::tape tp;
    auto x = tp.variable(x0);
    auto y = (x * x * x).eval(pol); // three leaves, one input
    std::size_t const bytes = tp.saved_bytes(), one = std::size_t(x0.size()) * sizeof(double);
    CHECK(bytes >= one);
    CHECK(bytes < 2 * one);
    tp.backward(dc::sum(y));
    auto g = x.grad().to_vector(), av = x0.to_vector();
    for (std::size_t i = 0; i < g.size(); ++i)
      CHECK(g[i] == doctest::Approx(3 * av[i] * av[i]).epsilon(1e-12));
  };
  for (auto const *x0 : {&a, &big}) {
    run(*x0, dc::policy::recompute);
    run(*x0, dc::policy::store);
  }
  // Under the store policy with two outputs, each reading the repeated leaf (its partials summed
  // per output), against central differences.
  auto b = random_tensor({4, 3}, 12, 0.2, 0.9);
  check_all(
      [](auto const &v) {
        auto [p, q] =
            dc::eval(dc::policy::store, v[0] * v[1] * v[0], dc::sin(v[0]) + v[0] * v[1] - v[1]);
        return V64(p * q);
      },
      {a, b});
  // The same tensor view is one constant leaf too; two different views of it are two.
  auto k = random_tensor({4, 3}, 11);
  check_all(
      [k](auto const &v) { return V64(v[0] * k + (v[0] - k) * k - k.transposed().transposed()); },
      {a});
}

TEST_CASE("lazy: scalar leaves and rank-0 variables") {
  auto a = random_tensor({3, 2}, 12, 0.3, 0.9), s = T64::scalar(0.7);
  auto r = check_all(
      [](auto const &v) {
        return V64(2.0 * v[0] - 1.5 / v[0] + dc::pow(v[0], 3.0) + dc::pow(2.0, v[1]) * v[0]);
      },
      {a, s});
  CHECK(r.nodes == 1);
}

TEST_CASE("lazy: materialisation by matmul, sum, slice, fused() and backward") {
  auto a = random_tensor({3, 4}, 13), b = random_tensor({3, 4}, 14), w = random_tensor({4, 2}, 15);
  auto r = check_all([](auto const &v) { return dc::matmul(dc::sigmoid(v[0]) * v[1], v[2]); },
                     {a, b, w});
  CHECK(r.nodes == 2); // one fused node + matmul
  r = check_all([](auto const &v) { return dc::sum(dc::tanh(v[0]) * v[1] + 1.0, {1}); }, {a, b});
  CHECK(r.nodes == 2); // one fused node + sum
  r = check_all([](auto const &v) { return dc::slice(v[0] * v[1], 1, 0, 2) * 3.0; }, {a, b});
  CHECK(r.nodes == 3);
  dc::tape tp;
  auto x = tp.variable(a);
  tp.backward(dc::sum(x * x) * 0.5); // backward materialises its (lazy) argument
  auto g = x.grad().to_vector(), av = a.to_vector();
  for (std::size_t i = 0; i < g.size(); ++i)
    CHECK(g[i] == doctest::Approx(av[i]));
}

namespace {
constexpr auto lstm_kernel = dc::kernel([](auto i, auto f, auto g, auto o, auto c) {
  auto c2 = dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g);
  return dc::outputs(dc::sigmoid(o) * dc::tanh(c2), c2);
});
} // namespace

TEST_CASE("lazy: an LSTM cell written with plain operators is ONE fused node") {
  const dc::index_t B = 3, I = 4, H = 2;
  auto X = random_tensor({B, I}, 121), H0 = random_tensor({B, H}, 122),
       C0 = random_tensor({B, H}, 123), Wx = random_tensor({I, 4 * H}, 124),
       Wh = random_tensor({H, 4 * H}, 125), bias = random_tensor({4 * H}, 126);
  std::size_t cell_nodes = 0;
  auto cell = [&](auto const &v, int mode) {
    auto gates = dc::matmul(v[0], v[3]) + dc::matmul(v[1], v[4]) + v[5];
    auto gate = [&](int k) { return dc::slice(gates, 1, k * H, (k + 1) * H); };
    auto i = gate(0), f = gate(1), g = gate(2), o = gate(3);
    std::size_t before = v[0].owner()->node_count();
    std::array<V64, 2> r;
    if (mode == 0) {
      auto c2 = dc::sigmoid(f) * v[2] + dc::sigmoid(i) * dc::tanh(g);
      auto h2 = dc::sigmoid(o) * dc::tanh(c2);
      r = dc::eval(h2, c2);
    } else {
      r = dc::fused(lstm_kernel, i, f, g, o, v[2]);
    }
    cell_nodes = v[0].owner()->node_count() - before;
    return V64(weigh(r[0]) + weigh(r[1]));
  };
  auto lazy = check_all([&](auto const &v) { return cell(v, 0); }, {X, H0, C0, Wx, Wh, bias});
  run([&](auto const &v) { return cell(v, 0); }, {X, H0, C0, Wx, Wh, bias}, true);
  CHECK(cell_nodes == 1); // (finite differences record nothing: no gradients there)
  auto explicit_kernel =
      run([&](auto const &v) { return cell(v, 1); }, {X, H0, C0, Wx, Wh, bias}, true);
  for (std::size_t k = 0; k < lazy.grads.size(); ++k)
    for (std::size_t j = 0; j < lazy.grads[k].size(); ++j)
      CHECK(lazy.grads[k][j] == doctest::Approx(explicit_kernel.grads[k][j]).epsilon(1e-12));
  // Unfused: c2 is evaluated once although it appears in both outputs.
  dc::tape tp;
  tp.fused = false;
  auto vi = tp.variable(random_tensor({B, H}, 1)), vf = tp.variable(random_tensor({B, H}, 2)),
       vg = tp.variable(random_tensor({B, H}, 3)), vo = tp.variable(random_tensor({B, H}, 4)),
       vc = tp.variable(random_tensor({B, H}, 5));
  auto c2 = dc::sigmoid(vf) * vc + dc::sigmoid(vi) * dc::tanh(vg);
  auto [h2, c2v] = dc::eval(dc::sigmoid(vo) * dc::tanh(c2), c2);
  CHECK(tp.node_count() == 9); // 3 sigmoid, 2 tanh, 3 *, 1 +
  CHECK(h2.requires_grad());
  CHECK(c2v.requires_grad());
  // Fused, c2 inside h2 shares h2's leaves: the node's inputs are the 5 variables, no padding.
  dc::tape t2;
  auto wi = t2.variable(random_tensor({B, H}, 1)), wf = t2.variable(random_tensor({B, H}, 2)),
       wg = t2.variable(random_tensor({B, H}, 3)), wo = t2.variable(random_tensor({B, H}, 4)),
       wc = t2.variable(random_tensor({B, H}, 5));
  auto d2 = dc::sigmoid(wf) * wc + dc::sigmoid(wi) * dc::tanh(wg);
  auto r2 = dc::eval(dc::policy::recompute, dc::sigmoid(wo) * dc::tanh(d2), d2);
  CHECK(t2.node_count() == 1);
  CHECK(t2.saved_bytes() == 5 * std::size_t(B * H) * sizeof(double));
  auto fused_c2 = r2[1].value().to_vector(), unfused_c2 = c2v.value().to_vector();
  for (std::size_t k = 0; k < fused_c2.size(); ++k)
    CHECK(fused_c2[k] == doctest::Approx(unfused_c2[k]).epsilon(1e-12));
}

TEST_CASE("lazy: a leaf modified in place before materialisation is an error") {
  dc::tape tp;
  auto x = tp.variable(random_tensor({4}, 20));
  auto k = random_tensor({4}, 21);
  auto e = dc::exp(x) * k;
  k.add_(T64::scalar(1.0));
  CHECK_THROWS_AS(e.eval(), dc::version_error);
  auto e2 = dc::exp(x) + 1.0;
  x.value().scale_(2.0);
  CHECK_THROWS_AS(dc::sum(e2), dc::version_error);
}
