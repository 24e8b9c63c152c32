// The README's short example (scripts/check-readme-snippets checks that the README's lines are in
// this file): one lambda (the LSTM cell update) run over arrays as one fused pass, for values,
// values + diagonal partials, and the VJP. Checks one element against duals evaluated directly
// and returns non-zero on a mismatch.
#include <dualcast/dualcast.hpp>
namespace dc = dualcast;

#include <cmath>
#include <cstdio>
#include <vector>

// One lambda: the LSTM cell update, two outputs.
constexpr auto lstm = dc::kernel([](auto i, auto f, auto g, auto o, auto c) {
  auto c2 = dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g);
  return dc::outputs(dc::sigmoid(o) * dc::tanh(c2), c2);
});

int main() {
  // On plain numbers or duals a kernel is just its lambda.
  dc::dual<double, 1> x = dc::dual<double, 1>::variable(0.3, 0);
  auto [h, c2] = lstm(x, 0.1, 0.2, 0.4, 1.0); // h.d[0] = dh/di at this point
  std::printf("h = %.6f, dh/di = %.6f; c2 = %.6f, dc2/di = %.6f\n", h.val, h.d[0], c2.val, c2.d[0]);

  // Arrays: a batch of 64 x 32 elements, with c broadcast along the rows.
  const long rows = 64, cols = 32, n = rows * cols;
  dc::shape const s{rows, cols}, row{cols};
  std::vector<std::vector<float>> mem(22);
  auto array = [&](int k, dc::shape const &sh) -> std::vector<float> & {
    mem[std::size_t(k)].resize(std::size_t(sh.size()));
    return mem[std::size_t(k)];
  };
  for (int k = 0; k < 4; ++k)
    for (long e = 0; e < n; ++e)
      array(k, s)[std::size_t(e)] = std::sin(0.37f * float(e) + float(k));
  for (long j = 0; j < cols; ++j)
    array(4, row)[std::size_t(j)] = std::cos(0.5f * float(j));
  for (long e = 0; e < n; ++e)
    array(20, s)[std::size_t(e)] = 1.0f, array(21, s)[std::size_t(e)] = 0.0f; // hbar, c2bar
  auto in = [&](int k, dc::shape const &sh) {
    return dc::view<const float>(mem[std::size_t(k)].data(), sh);
  };
  auto out = [&](int k, dc::shape const &sh) { return dc::view<float>(array(k, sh).data(), sh); };
  auto I = in(0, s), F = in(1, s), G = in(2, s), O = in(3, s), C = in(4, row);
  auto H = out(5, s), C2 = out(6, s);
  auto dHdI = out(7, s), dHdF = out(8, s), dHdG = out(9, s), dHdO = out(10, s), dHdC = out(11, s);
  auto dCdI = out(12, s), dCdF = out(13, s), dCdG = out(14, s), dCdO = out(15, s),
       dCdC = out(16, s);
  auto Ibar = out(17, s), Fbar = out(18, s), Gbar = out(19, s);
  std::vector<float> obar(static_cast<std::size_t>(n)), cbar(static_cast<std::size_t>(cols));
  auto Obar = dc::view<float>(obar.data(), s), Cbar = dc::view<float>(cbar.data(), row);
  auto Hbar = in(20, s), C2bar = in(21, s);

  // Over arrays (views of your memory, numpy broadcasting), one fused pass each:
  dc::cpu ex{2};                                      // 2 threads
  dc::apply(ex, lstm, dc::out(H, C2), I, F, G, O, C); // values
  dc::apply(ex, lstm, dc::active<0, 1, 2, 3, 4>,      // values + 10 partial arrays
            dc::out(H, C2), dc::out(dHdI, dHdF, dHdG, dHdO, dHdC, dCdI, dCdF, dCdG, dCdO, dCdC), I,
            F, G, O, C);
  dc::vjp(ex, lstm, dc::out(Ibar, Fbar, Gbar, Obar, Cbar), // input cotangents, re-evaluating
          dc::in(I, F, G, O, C), dc::in(Hbar, C2bar));     // duals; nothing stored
  dc::value_and_vjp(ex, lstm, dc::out(H, C2),              // both in ONE pass, when the output
                    dc::out(Ibar, Fbar, Gbar, Obar, Cbar), // cotangents are known up front
                    dc::in(I, F, G, O, C), dc::in(Hbar, C2bar));

  // Check element (3, 5) against duals evaluated directly.
  const long r = 3, j = 5, e = r * cols + j;
  auto at = [&](int k, long idx) { return double(mem[std::size_t(k)][std::size_t(idx)]); };
  using D = dc::dual<double, 5>;
  auto [hd, cd] = lstm(D::variable(at(0, e), 0), D::variable(at(1, e), 1), D::variable(at(2, e), 2),
                       D::variable(at(3, e), 3), D::variable(at(4, j), 4));
  bool ok = std::abs(at(5, e) - hd.val) < 1e-5 && std::abs(at(6, e) - cd.val) < 1e-5;
  for (int k = 0; k < 5; ++k)
    ok = ok && std::abs(at(7 + k, e) - hd.d[k]) < 1e-5 && std::abs(at(12 + k, e) - cd.d[k]) < 1e-5;
  for (int k = 0; k < 3; ++k)
    ok = ok && std::abs(at(17 + k, e) - hd.d[k]) < 1e-5;
  ok = ok && std::abs(double(obar[std::size_t(e)]) - hd.d[3]) < 1e-5;
  std::printf("element (%ld, %ld): h = %.6f (expected %.6f), dh/dc = %.6f (expected %.6f): %s\n", r,
              j, at(5, e), hd.val, at(11, e), hd.d[4], ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
