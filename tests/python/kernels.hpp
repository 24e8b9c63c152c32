// The user kernels of the PyTorch tests: registered as torch operators (torch_kernels.cpp), whose
// library also runs them through dualcast directly (a reference entry), so that the tests compare
// the two bit for bit.
#pragma once

#include <dualcast/core/config.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/math/functions.hpp>

namespace dualcast_tests {

// A data-dependent branch per element: x above the threshold t is compressed logarithmically
// with scale s, below it passes through; two outputs (the value and a smooth weight).
struct softclip_fn {
  template <class X, class T, class S>
  DUALCAST_HD auto operator()(X const &x, T const &t, S const &s) const {
    using dualcast::exp;
    using dualcast::log;
    using R = decltype(t + s * log(1 + (x - t) / s) + x);
    R y;
    if (x > t)
      y = R(t + s * log(1 + (x - t) / s));
    else
      y = R(x);
    return dualcast::outputs(y, R(x * exp(-s * x * x)));
  }
};
inline constexpr dualcast::kernel<softclip_fn> softclip{softclip_fn{}};

} // namespace dualcast_tests
