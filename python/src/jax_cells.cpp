// The ready cells as XLA FFI handlers for dualcast.jax (python/dualcast/jax.py): the package's own
// library, built by cmake/DualcastJax.cmake. The same lines in jax_cells.cu give the CUDA
// handlers. Each cell also gets a reference entry (dualcast::apply / vjp called directly, no XLA)
// for the tests' bit-for-bit comparison and the benchmark's "called from C++" row.
#include <dualcast/interop/detail/reference_entry.hpp>
#include <dualcast/interop/xla_ffi.hpp>
#include <dualcast/kernel/cells.hpp>

namespace dc = dualcast;

DUALCAST_XLA_KERNEL(lstm_cell, dc::cells::lstm);
DUALCAST_XLA_KERNEL(gru_cell, dc::cells::gru);
// The masks z, zb (positions 0 and 1) are not differentiated: their values pick the branch.
DUALCAST_XLA_KERNEL(hmlstm_update, dc::cells::hmlstm_update, 2, 3, 4, 5);

DUALCAST_REFERENCE_ENTRY(lstm_cell, dc::cells::lstm);
DUALCAST_REFERENCE_ENTRY(gru_cell, dc::cells::gru);
DUALCAST_REFERENCE_ENTRY(hmlstm_update, dc::cells::hmlstm_update, 2, 3, 4, 5);
