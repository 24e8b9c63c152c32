// Kernels for tests/python/test_jax_ops.py: a user kernel with a data-dependent branch and two
// outputs, one with a non-differentiated input, each with its reference entry (dualcast::apply /
// vjp called directly) for the bit-for-bit comparison.
#include <dualcast/interop/detail/reference_entry.hpp>
#include <dualcast/interop/xla_ffi.hpp>

namespace dc = dualcast;

namespace {
// y = x w + b where x > 0, else tanh(x) w + b exp(x) (one return type for both branches); and
// x w as a second output.
constexpr auto branchy = dc::kernel([](auto x, auto w, auto b) {
  using R = decltype(dc::tanh(x) * w + b * dc::exp(x));
  if (x > 0)
    return dc::outputs(R(x * w + b), R(x * w));
  return dc::outputs(R(dc::tanh(x) * w + b * dc::exp(x)), R(x * w));
});
// s x^2 + sin(x): only x (position 0) is differentiated.
constexpr auto scaled = dc::kernel([](auto x, auto s) { return s * x * x + dc::sin(x); });
} // namespace

DUALCAST_XLA_KERNEL(branchy, branchy);
DUALCAST_XLA_KERNEL(scaled, scaled, 0);

DUALCAST_REFERENCE_ENTRY(branchy, branchy);
DUALCAST_REFERENCE_ENTRY(scaled, scaled, 0);
