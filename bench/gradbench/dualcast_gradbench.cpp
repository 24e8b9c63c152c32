// dualcast as a GradBench tool: reads GradBench's messages on stdin, answers on stdout
// (protocol.hpp), until end of input. The modules are under modules/, one file each; functions
// named *_plain are plain double-precision objectives for the side-by-side timings (compare.py),
// not part of any eval.
//
//   dualcast_gradbench [--threads N]      (default 1: GradBench compares tools single-threaded)
#include "protocol.hpp"

#include "modules/all.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#if defined(_OPENMP)
#include <omp.h>
#endif

// OpenBLAS's thread count, where the BLAS is OpenBLAS (a weak reference: null with another BLAS).
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      gradbench::executor().threads = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--threads N]\n", argv[0]);
      return 2;
    }
  }
  // Not only the tape's executor: some of the tape's operations run on OpenMP's default team, and
  // matmul on the BLAS's threads; all of them get the tool's thread count.
  int const threads = gradbench::executor().threads;
#if defined(_OPENMP)
  if (threads > 0)
    omp_set_num_threads(threads);
#endif
  if (openblas_set_num_threads && threads > 0)
    openblas_set_num_threads(threads);
  std::ios::sync_with_stdio(false);
  return gradbench::serve(gradbench::all_modules(), std::cin, std::cout);
}
