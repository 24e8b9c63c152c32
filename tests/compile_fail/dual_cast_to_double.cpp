// must-not-compile: a dual number cast to a plain number (its partials would be dropped).
// expect: a dual number cannot be converted to a plain number
#include <dualcast/numbers/dual.hpp>

int main() {
  auto x = dualcast::dual<double, 1>::variable(0.5, 0);
  return static_cast<int>(static_cast<double>(x));
}
