// must-not-compile: adding duals of different widths.
// expect: cannot combine duals of different widths
#include <dualcast/numbers/dual.hpp>

int main() {
  auto z = dualcast::dual<double, 2>{} + dualcast::dual<double, 3>{};
  (void)z;
}
