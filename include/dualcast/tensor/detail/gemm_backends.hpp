// dualcast/tensor/detail/gemm_backends.hpp: the matrix product hooks the tape's matmul runs on:
// CBLAS on the CPU, cuBLAS in translation units compiled by nvcc (link CUDA::cublas there).
// Separate from tensor/detail/device_dispatch.hpp so that only programs using matmul need <cblas.h>
// and a BLAS.
#pragma once

#include <dualcast/backend/cpu/blas.hpp>
#if defined(__CUDACC__)
#include <dualcast/backend/cuda/blas.cuh>
#endif
