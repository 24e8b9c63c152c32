// The README's example: one lambda (the LSTM cell update) run over arrays as one fused pass, for
// values, values + diagonal partials, and the VJP. Checks one element against duals evaluated
// directly and returns non-zero on a mismatch.
#include <dualcast/dualcast.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

namespace dc = dualcast;

constexpr auto lstm = dc::kernel([](auto i, auto f, auto g, auto o, auto c) {
  auto c2 = dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g);
  return dc::outputs(dc::sigmoid(o) * dc::tanh(c2), c2);
});

int main() {
  // On plain numbers or duals a kernel is just its lambda.
  auto x = dc::dual<double, 1>::variable(0.3, 0);
  auto [h0, c0] = lstm(x, 0.1, 0.2, 0.4, 1.0);
  std::printf("h = %.6f, dh/di = %.6f; c2 = %.6f, dc2/di = %.6f\n", h0.val, h0.d[0], c0.val,
              c0.d[0]);

  // Over arrays: a batch of 64 x 32 elements, with c broadcast along the rows.
  const long rows = 64, cols = 32, n = rows * cols;
  std::vector<float> in[4], c(cols), h(n), c2(n), parts[10], hbar(n, 1.0f), c2bar(n, 0.0f), xbar[5];
  for (int k = 0; k < 4; ++k) {
    in[k].resize(n);
    for (long e = 0; e < n; ++e)
      in[k][e] = std::sin(0.37f * float(e) + float(k));
  }
  for (long j = 0; j < cols; ++j)
    c[j] = std::cos(0.5f * float(j));
  dc::shape s{rows, cols};
  auto I = dc::view<const float>(in[0].data(), s), F = dc::view<const float>(in[1].data(), s),
       G = dc::view<const float>(in[2].data(), s), O = dc::view<const float>(in[3].data(), s);
  auto C = dc::view<const float>(c.data(), {cols});
  auto mut = [&](std::vector<float> &v, dc::shape const &sh) {
    v.resize(std::size_t(sh.size()));
    return dc::view<float>(v.data(), sh);
  };

  dc::cpu ex{2};
  dc::apply(ex, lstm, dc::out(mut(h, s), mut(c2, s)), I, F, G, O, C); // values
  dc::apply(ex, lstm, dc::active<0, 1, 2, 3, 4>, dc::out(mut(h, s), mut(c2, s)),
            dc::out(mut(parts[0], s), mut(parts[1], s), mut(parts[2], s), mut(parts[3], s),
                    mut(parts[4], s), mut(parts[5], s), mut(parts[6], s), mut(parts[7], s),
                    mut(parts[8], s), mut(parts[9], s)),
            I, F, G, O, C); // values and the 10 partials dh/dx, dc2/dx
  dc::vjp(ex, lstm,
          dc::out(mut(xbar[0], s), mut(xbar[1], s), mut(xbar[2], s), mut(xbar[3], s),
                  mut(xbar[4], {cols})),
          dc::in(I, F, G, O, C),
          dc::in(dc::view<const float>(hbar.data(), s), dc::view<const float>(c2bar.data(), s)));

  // Check element (3, 5) against duals evaluated directly.
  const long r = 3, j = 5, e = r * cols + j;
  using D = dc::dual<double, 5>;
  auto [hd, cd] = lstm(D::variable(in[0][e], 0), D::variable(in[1][e], 1), D::variable(in[2][e], 2),
                       D::variable(in[3][e], 3), D::variable(c[j], 4));
  bool ok = std::abs(h[e] - hd.val) < 1e-5 && std::abs(c2[e] - cd.val) < 1e-5;
  for (int k = 0; k < 5; ++k)
    ok = ok && std::abs(parts[k][e] - hd.d[k]) < 1e-5;
  for (int k = 0; k < 4; ++k)
    ok = ok && std::abs(xbar[k][e] - hd.d[k]) < 1e-5;
  std::printf("element (%ld, %ld): h = %.6f (expected %.6f), dh/dc = %.6f (expected %.6f): %s\n", r,
              j, h[e], hd.val, parts[4][e], hd.d[4], ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
