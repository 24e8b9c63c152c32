// dualcast/interop/torch_cuda.cuh: the CUDA half of a kernel's PyTorch operators, in a .cu file of
// the same library, compiled by nvcc WITHOUT torch's headers (which nvcc's C++20 front end does
// not parse: torch 1.13's c10::List over an incomplete IValue):
//
//   // my_kernels.cu
//   #include <dualcast/interop/torch_cuda.cuh>
//   #include "my_kernels.hpp"                          // the kernel, DUALCAST_HD
//   DUALCAST_TORCH_CUDA_KERNEL(myops, softclip, softclip)
//
// and DUALCAST_TORCH_KERNEL(myops, softclip, softclip, ...) in a .cpp file as before. The host
// registration (interop/torch.hpp) finds these calls by the operator's name when its arguments
// are CUDA tensors and runs them on torch's current stream; the options after the kernel are the
// host line's (only .nondiff matters here: copy the line). dualcast_add_python_kernels compiles
// .cu sources with nvcc and defines DUALCAST_TORCH_CUDA for the library's host sources.
#pragma once

#include <dualcast/backend/cuda.cuh>
#include <dualcast/interop/kernel_calls.hpp>

#include <cuda_runtime.h>

#include <type_traits>
#include <utility>

namespace dualcast::interop::detail {

template <class T, class F, bool S>
void cuda_apply(void *stream, view<T const> const *in, view<T> const *out) {
  run_apply<T>(dualcast::cuda{static_cast<cudaStream_t>(stream), 256, true}, kernel<F, S>{F{}}, in,
               out);
}

template <unsigned ND, class T, class F, bool S>
void cuda_vjp(void *stream, unsigned sub, view<T const> const *in, view<T> const *xbar,
              view<T const> const *ybar) {
  constexpr int NI = kernel_arity<F, float>();
  constexpr int NO = outputs_of_views<F, float>(std::make_index_sequence<NI>{});
  run_vjp_subset<NI, NO, ND>(dualcast::cuda{static_cast<cudaStream_t>(stream), 256, true},
                             kernel<F, S>{F{}}, sub, in, xbar, ybar);
}

template <unsigned ND, class F, bool S>
int register_cuda_calls(char const *qualname, kernel<F, S> const &) {
  static_assert(std::is_default_constructible_v<F>,
                "DUALCAST_TORCH_CUDA_KERNEL: the kernel's function object must be default "
                "constructible (a lambda without captures, or a struct)");
  cuda_calls c;
  c.f = {&cuda_apply<float, F, S>, &cuda_vjp<ND, float, F, S>};
  c.d = {&cuda_apply<double, F, S>, &cuda_vjp<ND, double, F, S>};
  cuda_registry()[qualname] = c;
  return 0;
}

} // namespace dualcast::interop::detail

#define DUALCAST_INTEROP_CAT2(a, b) a##b
#define DUALCAST_INTEROP_CAT(a, b) DUALCAST_INTEROP_CAT2(a, b)

// Registers the CUDA calls of the operators ns::name / ns::name_vjp (see the top of this file).
#define DUALCAST_TORCH_CUDA_KERNEL(ns, name, kernel, ...)                                          \
  [[maybe_unused]] static int const DUALCAST_INTEROP_CAT(dualcast_torch_cuda_, __COUNTER__) = [] { \
    static constexpr ::dualcast::interop::torch_options o{__VA_ARGS__};                            \
    return ::dualcast::interop::detail::register_cuda_calls<o.nondiff>(#ns "::" #name, kernel);    \
  }();
