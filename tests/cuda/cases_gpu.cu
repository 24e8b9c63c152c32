// The backend-independent test bodies of tests/cases/, run on the CUDA backend. Compiled by nvcc
// into a small library that tests/test_gpu.cpp (host code, doctest) calls; those tests report
// "skipped" when no GPU exists. (The tape cases are in tape_cases_gpu.cu: a second translation
// unit, so that the two compile in parallel.)
#include <dualcast/cuda.cuh>

#include "../cases/kernel_law.hpp"
#include "../cases/lstm_case.hpp"

#include <string>
#include <vector>

namespace {
template <class T> struct device_memory {
  T *alloc(long n) {
    void *p = nullptr;
    dualcast::detail::cuda_backend::check(cudaMalloc(&p, std::size_t(n) * sizeof(T)), "cudaMalloc");
    return static_cast<T *>(p);
  }
  void upload(T *dst, std::vector<T> const &src) {
    dualcast::detail::cuda_backend::check(
        cudaMemcpy(dst, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  void download(std::vector<T> &dst, T const *src) {
    dualcast::detail::cuda_backend::check(
        cudaMemcpy(dst.data(), src, dst.size() * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  }
  void release(T *p) { (void)cudaFree(p); }
};
} // namespace

bool dualcast_gpu_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::string dualcast_gpu_lstm_case_float() {
  device_memory<float> mem;
  return dualcast_tests::check_lstm_case<float>(dualcast::cuda{}, mem, 67, 129);
}
std::string dualcast_gpu_lstm_case_double() {
  device_memory<double> mem;
  return dualcast_tests::check_lstm_case<double>(dualcast::cuda{}, mem, 300, 131);
}

// CPU == GPU (tests/cases/kernel_law.hpp): the CPU backend against CUDA on the same inputs, every
// fused-kernel mode, strided and broadcast layouts, divergent branches.
std::string dualcast_gpu_kernel_law_float() {
  device_memory<float> mem;
  return dualcast_tests::kernel_law<float>(dualcast::cuda{}, mem, false);
}
std::string dualcast_gpu_kernel_law_double() {
  device_memory<double> mem;
  return dualcast_tests::kernel_law<double>(dualcast::cuda{}, mem, false);
}
