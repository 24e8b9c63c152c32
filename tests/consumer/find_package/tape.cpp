// Consumer test of dualcast::compiled: a tape program whose matmul, checks and concat come from
// the compiled component (DUALCAST_COMPILED: the headers declare them extern), checked against
// central finite differences in double.
#include <dualcast/autodiff.hpp>

#include <cmath>
#include <cstdio>

#if !defined(DUALCAST_COMPILED)
#error "dualcast::compiled must define DUALCAST_COMPILED for the consumer"
#endif

namespace dc = dualcast;

namespace {
// f(x, w) = sum(tanh(concat(x @ w, x) * 0.5)); x 2 x 3, w 3 x 2.
template <class X> auto f(X const &x, X const &w) {
  return dc::sum(dc::tanh(dc::concat(std::vector<X>{dc::matmul(x, w), x}, 1) * 0.5));
}
} // namespace

int main() {
  auto x = dc::uniform<double>({2, 3}, -1.0, 1.0, 1);
  auto w = dc::uniform<double>({3, 2}, -1.0, 1.0, 2);
  auto [value, g] = dc::value_and_grad([](auto const &a, auto const &b) { return f(a, b); })(x, w);
  double worst = 0;
  for (int a = 0; a < 2; ++a) {
    dc::tensor<double> const &t = a == 0 ? x : w;
    for (dc::index_t i = 0; i < t.size(); ++i) {
      double const h = 1e-6, v = t.data()[i];
      auto at = [&](double d) {
        t.mutable_data()[i] = v + d;
        dc::tape tp;
        double r = f(tp.variable(x), tp.variable(w)).item();
        t.mutable_data()[i] = v;
        return r;
      };
      double const fd = (at(h) - at(-h)) / (2 * h);
      worst = std::fmax(worst, std::abs(fd - g[std::size_t(a)].data()[i]));
    }
  }
  if (!(worst < 1e-8)) {
    std::printf("FAIL: dualcast::compiled: gradient off finite differences by %g\n", worst);
    return 1;
  }
  std::printf("ok: dualcast::compiled: f = %.6f, gradients within %.1e of finite differences\n",
              value, worst);
  return 0;
}
