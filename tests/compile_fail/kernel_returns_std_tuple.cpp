// must-not-compile: a kernel returning two outputs as a std::tuple instead of dualcast::outputs.
// expect: a kernel returns several outputs as dualcast::outputs(a, b, ...)
#include <dualcast/dualcast.hpp>

#include <tuple>

int main() {
  double xs[4] = {1, 2, 3, 4}, ys[4] = {}, zs[4] = {};
  dualcast::view<double> x(xs, {4}), y(ys, {4}), z(zs, {4});
  dualcast::apply(dualcast::cpu{}, dualcast::kernel([](auto a) { return std::tuple(a, a * a); }),
                  dualcast::out(y, z), x);
}
