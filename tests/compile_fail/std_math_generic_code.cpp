// must compile: generic code that calls math functions unqualified after `using std::exp` finds
// dualcast's functions for dualcast's numbers (argument-dependent lookup), not the overloads
// math/detail/std_functions.hpp declares in std to explain std::exp(dual); plain numbers still
// take std's.
#include <dualcast/dualcast.hpp>

#include <cmath>

template <class X> X f(X const &x) {
  using std::abs;
  using std::atan2;
  using std::exp;
  using std::pow;
  return exp(x) + pow(x, x) + atan2(x, x) + abs(x);
}

int main() {
  dualcast::dual<double, 2> d(0.5);
  dualcast::dual<dualcast::batch<double, 4>, 1> db(dualcast::batch<double, 4>(0.5));
  dualcast::batch<float, 8> b(0.5f);
  double const r = f(0.5) + f(d).val + f(db).val[0] + f(b)[0];
  return r > 0 ? 0 : 1;
}
