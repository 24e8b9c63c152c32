// dualcast/backend/cpu/executor.hpp: the CPU executor value. Pass it to dualcast::apply / jvp /
// vjp to run a fused kernel on host memory with `threads` threads (0: OpenMP's default).
#pragma once

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace dualcast {

struct cpu {
  int threads = 0;

  int thread_count() const {
#if defined(_OPENMP)
    return threads > 0 ? threads : omp_get_max_threads();
#else
    return 1;
#endif
  }
};

} // namespace dualcast
