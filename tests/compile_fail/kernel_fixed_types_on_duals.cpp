// must-not-compile: a kernel whose lambda takes double, called directly on a dual (the fix: a
// generic lambda).
// expect: the kernel's lambda takes fixed parameter types and cannot be called with these
#include <dualcast/dualcast.hpp>

int main() {
  auto k = dualcast::kernel([](double a) { return a * a; });
  dualcast::dual<double, 1> x(2.0);
  x.d[0] = 1;
  return k(x).d[0] > 0 ? 0 : 1;
}
