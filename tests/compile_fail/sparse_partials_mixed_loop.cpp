// must-not-compile: a kernel with sparse partials whose loop accumulates over different inputs
// (acc depends on a, acc * b on a and b: its set would change across iterations). The fix: leave
// out sparse_partials (dense partials take any loop).
// expect: only takes values depending on its own inputs
// max-errors: 2
#include <dualcast/dualcast.hpp>

int main() {
  double as[16] = {1, 2, 3, 4}, bs[16] = {1, 1, 1, 1}, gs[16] = {}, hs[16] = {}, ys[16] = {};
  dualcast::view<double> a(as, {16}), b(bs, {16}), ga(gs, {16}), gb(hs, {16}), y(ys, {16});
  constexpr auto k = dualcast::sparse_partials(dualcast::kernel([](auto x, auto w) {
    auto acc = x;
    for (int i = 0; i < 3; ++i)
      acc = acc * w;
    return acc;
  }));
  dualcast::vjp(dualcast::cpu{}, k, dualcast::out(ga, gb), dualcast::in(a, b), dualcast::in(y));
}
