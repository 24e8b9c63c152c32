// bench/arity.cpp: how a fused node's policies fare as the number of active inputs grows.
//
//   y = tanh(x_1) * tanh(-x_2) * tanh(x_3) * ...   (k = 1..10 inputs, all requiring gradients)
//
// on the tape at 2048 x 2048 float32, forward + backward from a given output cotangent:
//   store       the node keeps k partial arrays (written forward, read backward)
//   recompute   the node keeps its inputs; backward re-evaluates the lambda on dual numbers
//   automatic   the cost model's choice (store_is_cheaper: store only while 2k <= k + 1, i.e.
//               k = 1; under automatic the store node is compiled only up to 16 partials)
//   unfused     one node per operation (2k - 1 nodes, each with its own pass)
// Dual numbers with more than dualcast's chunk width of partials are evaluated in chunks (the
// kernel re-run per chunk of partials): where that starts shows as a step in recompute's time.
// Output: CSV benchmark,variant,size,threads,median_ms,arity,ratio_to_recompute,tape_mib (the
// tape's saved bytes after forward: arrays held for backward beyond the variables themselves).
//   arity [--quick] [--threads N] [--reps N]
#include "common.hpp"

#include <dualcast/autodiff.hpp>

#include <array>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace dc = dualcast;

namespace {

// prod_k tanh(+-x_k), the sign alternating: a lambda of K arguments.
struct prod_tanh {
  template <class... X> DUALCAST_HD auto operator()(X const &...x) const {
    return product(std::index_sequence_for<X...>{}, x...);
  }
  template <std::size_t... I, class... X>
  DUALCAST_HD static auto product(std::index_sequence<I...>, X const &...x) {
    return (... * dc::tanh(I % 2 == 0 ? x : -x));
  }
};
constexpr dc::kernel<prod_tanh> kern{prod_tanh{}};

using F32 = dc::tensor<float>;

F32 random_tensor(dc::shape const &s, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  std::vector<float> v(std::size_t(s.size()));
  for (auto &x : v)
    x = u(g);
  return F32::from(s, v);
}

constexpr char const *names[] = {"store", "recompute", "automatic", "unfused"};

// One forward + backward of variant v with the first K inputs; the tape's saved bytes.
template <std::size_t... I>
std::size_t step(std::index_sequence<I...>, int v, std::vector<F32> const &xs, F32 const &seed,
                 int threads) {
  dc::tape tp;
  tp.ex = dc::cpu{threads};
  std::array<dc::var<float>, sizeof...(I)> x{tp.variable(xs[I])...};
  dc::var<float> y = v == 0   ? dc::fused(dc::policy::store, kern, x[I]...)
                     : v == 1 ? dc::fused(dc::policy::recompute, kern, x[I]...)
                     : v == 2 ? dc::fused(kern, x[I]...)
                              : dc::unfused(kern, x[I]...);
  std::size_t const bytes = tp.saved_bytes();
  tp.backward(std::vector<dc::var<float>>{y}, std::vector<F32>{seed});
  return bytes;
}

template <std::size_t K>
void sweep(int reps, int threads, dc::index_t n, std::vector<F32> const &xs, F32 const &seed) {
  std::size_t bytes[4] = {};
  for (int v = 0; v < 4; ++v) // warm-up
    bytes[v] = step(std::make_index_sequence<K>{}, v, xs, seed, threads);
  auto t = bench::interleaved(
      4, reps, [&](int v) { step(std::make_index_sequence<K>{}, v, xs, seed, threads); });
  double const recompute = bench::median(t[1]);
  for (int v = 0; v < 4; ++v) {
    double const ms = bench::median(t[std::size_t(v)]);
    std::printf("arity,%s,%ldx%ld,%d,%.3f,%zu,%.2f,%.1f\n", names[v], long(n), long(n), threads, ms,
                K, ms / recompute, double(bytes[v]) / 1048576.0);
  }
  std::fflush(stdout);
}

template <std::size_t... K>
void sweep_all(std::index_sequence<K...>, int reps, int threads, dc::index_t n,
               std::vector<F32> const &xs, F32 const &seed) {
  (sweep<K + 1>(reps, threads, n, xs, seed), ...);
}

} // namespace

int main(int argc, char **argv) {
  bench::options const o = bench::parse(argc, argv, 7, 2);
  dc::index_t const n = o.quick ? 256 : 2048;
  std::vector<F32> xs;
  for (unsigned k = 0; k < 10; ++k)
    xs.push_back(random_tensor({n, n}, 11 + k));
  F32 const seed = random_tensor({n, n}, 99);
  std::printf("benchmark,variant,size,threads,median_ms,arity,ratio_to_recompute,tape_mib\n");
  sweep_all(std::make_index_sequence<10>{}, o.reps, o.threads, n, xs, seed);
}
