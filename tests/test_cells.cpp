// The ready cells (kernel/cells.hpp, ops/cells.hpp): values against plain double formulas,
// gradients on the tape (both policies) against central differences, and the same kernels over
// views.
#include "tape_support.hpp"

#include <dualcast/dualcast.hpp>

#include <cmath>
#include <vector>

using tape_support::check_gradients;
using tape_support::random_tensor;

namespace {
double sig(double v) { return 1 / (1 + std::exp(-v)); }

void check_values(T64 const &got, std::vector<double> const &want) {
  auto g = got.to_vector();
  REQUIRE(g.size() == want.size());
  for (std::size_t k = 0; k < g.size(); ++k) {
    INFO("element " << k);
    CHECK(g[k] == doctest::Approx(want[k]).epsilon(1e-13));
  }
}
} // namespace

TEST_CASE("lstm_cell: values, gradients of both outputs, packed and separate gates") {
  shape const gs{3, 8}, cs{3, 2};
  T64 gates = random_tensor(gs, 11, -2, 2), c = random_tensor(cs, 12, -1, 1);
  {
    dc::tape tp;
    auto [h2, c2] = dc::lstm_cell(tp.constant(gates), tp.constant(c));
    auto gv = gates.to_vector(), cv = c.to_vector();
    std::vector<double> hw, cw;
    for (int r = 0; r < 3; ++r)
      for (int j = 0; j < 2; ++j) {
        auto at = [&](int k) { return gv[std::size_t(r * 8 + k * 2 + j)]; };
        double cn = sig(at(1)) * cv[std::size_t(r * 2 + j)] + sig(at(0)) * std::tanh(at(2));
        cw.push_back(cn);
        hw.push_back(sig(at(3)) * std::tanh(cn));
      }
    check_values(h2.value(), hw);
    check_values(c2.value(), cw);
  }
  auto both = [](auto pol) {
    return [pol](std::vector<V64> const &x) {
      auto [h2, c2] = dc::lstm_cell(pol, x[0], x[1]);
      return V64(h2 * 2.0 + c2);
    };
  };
  check_gradients(both(dc::policy::store), {gates, c});
  check_gradients(both(dc::policy::recompute), {gates, c});
  // Separate gate arrays, c broadcast along the rows.
  check_gradients(
      [](std::vector<V64> const &x) {
        auto [h2, c2] = dc::lstm_cell(x[0], x[1], x[2], x[3], x[4]);
        return V64(h2 - c2 * 0.5);
      },
      {random_tensor(cs, 1), random_tensor(cs, 2), random_tensor(cs, 3), random_tensor(cs, 4),
       random_tensor({2}, 5)});
}

TEST_CASE("gru_cell: values against PyTorch's formulation, gradients") {
  shape const gs{2, 9}, hs{2, 3};
  T64 gx = random_tensor(gs, 21, -2, 2), gh = random_tensor(gs, 22, -2, 2),
      h = random_tensor(hs, 23);
  {
    dc::tape tp;
    auto h2 = dc::gru_cell(tp.constant(gx), tp.constant(gh), tp.constant(h));
    auto xv = gx.to_vector(), hv = gh.to_vector(), h0 = h.to_vector();
    std::vector<double> want;
    for (int r = 0; r < 2; ++r)
      for (int j = 0; j < 3; ++j) {
        auto x = [&](int k) { return xv[std::size_t(r * 9 + k * 3 + j)]; };
        auto y = [&](int k) { return hv[std::size_t(r * 9 + k * 3 + j)]; };
        double rr = sig(x(0) + y(0)), z = sig(x(1) + y(1)), n = std::tanh(x(2) + rr * y(2));
        want.push_back((1 - z) * n + z * h0[std::size_t(r * 3 + j)]);
      }
    check_values(h2.value(), want);
  }
  check_gradients([](std::vector<V64> const &x) { return V64(dc::gru_cell(x[0], x[1], x[2])); },
                  {gx, gh, h});
}

TEST_CASE("hmlstm_update: FLUSH, COPY and UPDATE per element, masks constant") {
  // 4 x 6 with masks broadcast along the columns (1 x 6): every branch, and SIMD batches whose
  // lanes disagree.
  shape const s{4, 6}, ms{1, 6};
  T64 z = T64::from(ms, {1, 0, 0, 1, 0, 0}), zb = T64::from(ms, {0, 0, 1, 1, 0, 1});
  std::vector<T64> xs{random_tensor(s, 31), random_tensor(s, 32, -2, 2),
                      random_tensor(s, 33, -2, 2), random_tensor(s, 34, -2, 2)};
  {
    dc::tape tp;
    auto c2 = dc::hmlstm_update(z, zb, tp.constant(xs[0]), tp.constant(xs[1]), tp.constant(xs[2]),
                                tp.constant(xs[3]));
    std::vector<double> want;
    auto cv = xs[0].to_vector(), fv = xs[1].to_vector(), iv = xs[2].to_vector(),
         gv = xs[3].to_vector(), zv = z.to_vector(), zbv = zb.to_vector();
    for (std::size_t e = 0; e < cv.size(); ++e) {
      std::size_t const j = e % 6;
      double flush = sig(iv[e]) * std::tanh(gv[e]);
      want.push_back(zv[j] == 1                  ? flush
                     : zv[j] == 0 && zbv[j] == 0 ? cv[e]
                                                 : sig(fv[e]) * cv[e] + flush);
    }
    check_values(c2.value(), want);
  }
  for (int pol = 0; pol < 2; ++pol)
    check_gradients(
        [&](std::vector<V64> const &x) {
          return pol == 0
                     ? V64(dc::hmlstm_update(dc::policy::store, z, zb, x[0], x[1], x[2], x[3]))
                     : V64(dc::hmlstm_update(dc::policy::recompute, z, zb, x[0], x[1], x[2], x[3]));
        },
        xs);
  // COPY with a constant cell state: the branches mix a plain value and duals.
  dc::tape tp;
  auto f = tp.variable(xs[1]), i = tp.variable(xs[2]), g = tp.variable(xs[3]);
  tp.backward(dc::sum(dc::hmlstm_update(z, zb, xs[0], f, i, g)));
  auto gf = f.grad().to_vector();
  CHECK(gf[1] == 0.0); // column 1 copies: no gradient to f
  CHECK(gf[2] != 0.0); // column 2 updates
}

TEST_CASE("dlstm_cell: ADBench's D-LSTM layer-step, gradients of all eleven inputs") {
  // The cell has sparse partials: all eleven differentiated in one evaluation on the host (store:
  // the partials pass; recompute: the VJP pass), on a part batch and on full batches and a tail.
  for (dc::index_t n : {5, 19}) {
    std::vector<T64> xs;
    for (unsigned k = 0; k < 11; ++k)
      xs.push_back(random_tensor({n}, 40 + k));
    for (int pol = 0; pol < 2; ++pol)
      check_gradients(
          [&](std::vector<V64> const &x) {
            auto [h2, s2] = pol == 0 ? dc::dlstm_cell(dc::policy::store, x[0], x[1], x[2], x[3],
                                                      x[4], x[5], x[6], x[7], x[8], x[9], x[10])
                                     : dc::dlstm_cell(dc::policy::recompute, x[0], x[1], x[2], x[3],
                                                      x[4], x[5], x[6], x[7], x[8], x[9], x[10]);
            return V64(h2 + s2 * 3.0);
          },
          xs);
  }
}

TEST_CASE("cells over views: one pass, the same values as on the tape") {
  shape const s{3, 5};
  std::vector<T64> in;
  for (unsigned k = 0; k < 5; ++k)
    in.push_back(random_tensor(s, 50 + k));
  auto h = T64::empty(s), c2 = T64::empty(s);
  dc::apply(dc::cpu{2}, dc::cells::lstm, dc::out(h.mview(), c2.mview()), in[0].cview(),
            in[1].cview(), in[2].cview(), in[3].cview(), in[4].cview());
  dc::tape tp;
  auto [th, tc] = dc::lstm_cell(tp.constant(in[0]), tp.constant(in[1]), tp.constant(in[2]),
                                tp.constant(in[3]), tp.constant(in[4]));
  CHECK(h.to_vector() == th.value().to_vector());
  CHECK(c2.to_vector() == tc.value().to_vector());
  // Lengths check: the packed form wants a last axis divisible by the gate count.
  CHECK_THROWS_AS(dc::lstm_cell(tp.constant(random_tensor({2, 6}, 1)), tp.constant(in[0])),
                  dc::shape_error);
}
