// The ready cells' CUDA handlers for dualcast.jax (nvcc): the same lines as jax_cells.cpp, which
// in an nvcc translation unit define dualcast_xla_<name>_{fwd,vjp}_cuda, run on XLA's stream.
#include <dualcast/interop/xla_ffi.hpp>
#include <dualcast/kernel/cells.hpp>

namespace dc = dualcast;

DUALCAST_XLA_KERNEL(lstm_cell, dc::cells::lstm);
DUALCAST_XLA_KERNEL(gru_cell, dc::cells::gru);
DUALCAST_XLA_KERNEL(hmlstm_update, dc::cells::hmlstm_update, 2, 3, 4, 5);
