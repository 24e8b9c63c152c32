// The CUDA half of torch_kernels.cpp's operator (built where torch has CUDA): nvcc, no torch
// headers.
#include "kernels.hpp"

#include <dualcast/interop/torch_cuda.cuh>

DUALCAST_TORCH_CUDA_KERNEL(dualcast_tests, softclip, dualcast_tests::softclip)
