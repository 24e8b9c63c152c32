// The tests' user kernel (kernels.hpp) as a PyTorch operator: what a user's library looks like.
#include "kernels.hpp"

#include <dualcast/interop/detail/reference_entry.hpp>
#include <dualcast/interop/torch.hpp>

DUALCAST_TORCH_KERNEL(dualcast_tests, softclip, dualcast_tests::softclip,
                      .doc = "x compressed logarithmically above the threshold t (scale s); and "
                             "x exp(-s x^2)",
                      .args = "x, t, s")

// dualcast::apply / vjp of the same kernel, for test_torch_ops.py's bit-for-bit comparison.
DUALCAST_REFERENCE_ENTRY(softclip, dualcast_tests::softclip);
