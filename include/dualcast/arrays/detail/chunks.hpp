// dualcast/arrays/detail/chunks.hpp: how few long runs are cut into chunks that run in parallel (a
// whole-array sum on CUDA, max / min over few groups): about 1024 chunks in all, none shorter
// than 8192 elements. A decision on the shape alone, so results do not depend on the number of
// threads or the GPU.
#pragma once

#include <dualcast/arrays/shape.hpp>

namespace dualcast::detail {

struct chunking {
  index_t chunks, len; // each run: `chunks` chunks of `len` elements (the last shorter)
};

// `runs` runs of n elements each: cut only when there are fewer than 1024 runs of at least
// 4 * 8192 elements; otherwise one chunk per run.
inline chunking cut_runs(index_t runs, index_t n) {
  constexpr index_t target = 1024, shortest = 8192;
  if (runs >= target || n < 4 * shortest)
    return {1, n};
  index_t const per_run = (target + runs - 1) / runs;
  index_t len = (n + per_run - 1) / per_run;
  len = len < shortest ? shortest : len;
  return {(n + len - 1) / len, len};
}

} // namespace dualcast::detail
