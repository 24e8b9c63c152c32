// The C++ half of examples/python/jax_user_kernel.py: a user's kernel as a JAX operation.
// Built by dualcast_add_jax_kernels (cmake/DualcastJax.cmake) into a shared library.
#include <dualcast/interop/xla_ffi.hpp>

namespace dc = dualcast;

// A gated residual unit with a real branch per element: where the gate is open (u > 0) the input
// passes through scaled, else a smooth leak. One lambda; its forward and VJP are generated.
constexpr auto gated = dc::kernel([](auto x, auto u, auto w) {
  using R = decltype(dc::tanh(u) * x * w + x);
  if (u > 0)
    return R(dc::sigmoid(u) * x * w + x);
  return R(dc::tanh(u) * x * w + x);
});

DUALCAST_XLA_KERNEL(gated, gated);
