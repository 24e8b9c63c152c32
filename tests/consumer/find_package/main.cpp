// Consumer test (shared by the find_package and add_subdirectory projects):
// d/dx [exp(x) * x] at x = 2 is exp(2) * 3.
#include <dualcast/dualcast.hpp>

#include <cmath>
#include <cstdio>

namespace {
bool rel_close(double got, double want) { return std::abs(got - want) <= 1e-12 * std::abs(want); }
} // namespace

int main() {
  dualcast::dual<double, 1> x{2.0};
  x.d[0] = 1.0;
  auto y = dualcast::exp(x) * x;

  const double e2 = std::exp(2.0);
  const double val = y.val;
  const double der = y.d[0];
  if (!rel_close(val, e2 * 2.0) || !rel_close(der, e2 * 3.0)) {
    std::printf("FAIL: exp(x)*x at 2: value %.17g (want %.17g), derivative %.17g (want %.17g)\n",
                val, e2 * 2.0, der, e2 * 3.0);
    return 1;
  }
  std::printf("ok: exp(x)*x at 2 = %.17g, derivative %.17g\n", val, der);
  return 0;
}
