// bench/cuda_timing.cuh: what the GPU benchmarks share beside common.hpp: a CUDA call checked
// (the program and the step named, exit 1), and one run timed by CUDA events on the default
// stream (a bench::run_timer for common.hpp's interleaved).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <functional>

namespace bench {

inline void cuda_check(char const *program, cudaError_t e, char const *what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s: %s\n", program, what, cudaGetErrorString(e));
    std::exit(1);
  }
}

class event_timer {
public:
  explicit event_timer(char const *program) : program_(program) {
    cuda_check(program_, cudaEventCreate(&a_), "event");
    cuda_check(program_, cudaEventCreate(&b_), "event");
  }
  event_timer(event_timer const &) = delete;
  event_timer &operator=(event_timer const &) = delete;
  ~event_timer() { cudaEventDestroy(a_), cudaEventDestroy(b_); }
  // The milliseconds between events recorded before and after run (its work on the stream).
  double operator()(std::function<void()> const &run) const {
    cuda_check(program_, cudaEventRecord(a_), "record");
    run();
    cuda_check(program_, cudaEventRecord(b_), "record");
    cuda_check(program_, cudaEventSynchronize(b_), "run");
    float ms = 0;
    cuda_check(program_, cudaEventElapsedTime(&ms, a_, b_), "elapsed");
    return double(ms);
  }

private:
  char const *program_;
  cudaEvent_t a_{}, b_{};
};

} // namespace bench
