// The CUDA half of torch_cells.cpp's operators (built where torch has CUDA and nvcc is found):
// compiled by nvcc without torch's headers, found by the host registration by name.
#include <dualcast/interop/torch_cuda.cuh>
#include <dualcast/kernel/cells.hpp>

DUALCAST_TORCH_CUDA_KERNEL(dualcast, lstm_cell, dualcast::cells::lstm)
DUALCAST_TORCH_CUDA_KERNEL(dualcast, gru_cell, dualcast::cells::gru)
DUALCAST_TORCH_CUDA_KERNEL(dualcast, hmlstm_update, dualcast::cells::hmlstm_update,
                           .nondiff = 0b11u)
