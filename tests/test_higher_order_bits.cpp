// The values and gradients of a tape over duals against the plain tape's, bit for bit, where a
// fused node's gradients hold sums (docs/higher-order.md, "Bits"): a D-LSTM cell of eleven
// variables (sparse partials; the plain tape's node recomputes its partials in backward), flat
// and with broadcast arguments, and the D-LSTM model of the GradBench tool. Compiled at -O2 (g++;
// CMakeLists.txt): at the tests' -O0 no multiply-add is contracted into an FMA, and the two
// tapes' sums agreed even where their orders of operations did not.
#include "higher_order_support.hpp"
#include "models/dlstm.hpp"

#include <dualcast/autodiff.hpp>

#include <doctest/doctest.h>

#include <random>
#include <vector>

namespace {

using namespace higher_order_support;
using tape_support::random_tensor;

} // namespace

TEST_CASE("tape over duals: a fused node of eleven variables, flat and broadcast, bit for bit") {
  // dc::cells::dlstm: eleven variables, sparse partials on the host; the plain tape's node
  // recomputes its partials in backward (the cost model), and the node on duals must give its
  // values' and gradient's bits (its VJP pass, not the partials contracted apart: their sums
  // round differently where a gradient holds sums already): on arrays of the call's shape (the
  // node's pointer passes) and with arguments broadcast along the rows (its passes on views).
  T64 x = random_tensor({3, 4}, 22), v = random_tensor({3, 4}, 23);
  T64 const w = random_tensor({11, 4}, 24);
  auto loss = [&](bool broadcast) {
    return [&w, broadcast](auto const &xv) {
      auto arg = [&](dc::index_t i) {
        auto y = dc::detail::as_var(dc::sin(xv * dc::constant_like(xv, w.select(0, i))));
        return broadcast && i % 2 == 1 ? dc::detail::as_var(dc::sum(y, {0}) * 0.5) : y;
      };
      auto const wf = arg(3), wi = arg(4), wo = arg(5), wg = arg(6), bf = arg(7), bi = arg(8),
                 bo = arg(9), bg = arg(10);
      // two steps on the same weights: their gradients hold sums when the first step's node
      // adds its part to them
      auto h = dc::call(dc::cells::dlstm, arg(0), arg(1), arg(2), wf, wi, wo, wg, bf, bi, bo, bg);
      h = dc::call(dc::cells::dlstm, h[0], h[0] * 0.5, h[1], wf, wi, wo, wg, bf, bi, bo, bg);
      return dc::sum(h[0] * h[1]) + dc::sum(h[0]);
    };
  };
  check_second_order(loss(false), x, v, true);
  check_second_order(loss(true), x, v, true);
}

TEST_CASE("tape over duals: the D-LSTM model's value and gradient bit for bit") {
  dlstm::problem p;
  p.l = 2, p.c = 6, p.b = 5;
  std::mt19937 g(3);
  std::uniform_real_distribution<double> u(-1, 1);
  p.main.resize(std::size_t(2 * p.l * 4 * p.b)), p.extra.resize(std::size_t(3 * p.b));
  p.state.resize(std::size_t(2 * p.l * p.b)), p.seq.resize(std::size_t(p.c * p.b));
  for (auto *v : {&p.main, &p.extra, &p.state, &p.seq})
    for (auto &x : *v)
      x = u(g);
  T64 const M = T64::from({2 * p.l, 4 * p.b}, p.main), E = T64::from({3, p.b}, p.extra);
  T64 const v = random_tensor(M.dims(), 25);
  check_second_order([&](auto const &m) { return dlstm::loss(p, m, dc::constant_like(m, E)); }, M,
                     v, true);
}
