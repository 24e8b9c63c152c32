// dualcast/interop/kernel_calls.hpp: what the torch operators (interop/torch.hpp) and their CUDA
// half (interop/torch_cuda.cuh) share, without torch's headers: the registration options, a
// kernel's arity and outputs, the apply and vjp calls over arrays of views, and the table through
// which the host registration finds the CUDA calls that nvcc compiled in another translation unit
// of the same library (so nvcc never parses torch's headers).
#pragma once

#include <dualcast/arrays/view.hpp>
#include <dualcast/broadcast/broadcast.hpp>
#include <dualcast/interop/active_subsets.hpp>
#include <dualcast/kernel/detail/kernel_checks.hpp>
#include <dualcast/kernel/kernel.hpp>

#include <array>
#include <bit>
#include <cstddef>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

namespace dualcast::interop {

// What a registration says about its kernel besides the kernel itself.
struct torch_options {
  char const *doc = "";  // the Python callable's docstring
  char const *args = ""; // argument names, comma-separated, for messages and the docstring
  // Arguments never differentiated (bit a: argument a), e.g. masks that pick a branch: they never
  // become duals, and Python reports no gradient for them.
  unsigned nondiff = 0;
};

namespace detail {

#if defined(__GNUC__)
#define DUALCAST_INTEROP_HIDDEN __attribute__((visibility("hidden")))
#else
#define DUALCAST_INTEROP_HIDDEN
#endif

// The number of arguments a kernel's lambda takes (its smallest arity up to 16; 0: none fits).
template <class F, class T, std::size_t... J>
constexpr bool callable_with(std::index_sequence<J...>) {
  return std::is_invocable_v<F const &, decltype((void)J, T{})...>;
}
template <class F, class T, int N = 1> constexpr int kernel_arity() {
  if constexpr (N > 16)
    return 0;
  else if constexpr (callable_with<F, T>(std::make_index_sequence<N>{}))
    return N;
  else
    return kernel_arity<F, T, N + 1>();
}

template <class F, class T, std::size_t... J>
constexpr int outputs_of_views(std::index_sequence<J...>) {
  return dualcast::detail::check_kernel<F, T, decltype((void)J, view<T const>{})...>();
}

// The arguments that may be differentiated (all but the nondiff bits), in order.
template <int NI, unsigned ND> constexpr int differentiable_count() {
  return NI - std::popcount(ND & ((1u << NI) - 1u));
}
template <int NI, unsigned ND> constexpr auto differentiable_positions() {
  std::array<int, std::size_t(differentiable_count<NI, ND>())> p{};
  int n = 0;
  for (int a = 0; a < NI; ++a)
    if (!((ND >> a) & 1u))
      p[std::size_t(n++)] = a;
  return p;
}

template <class T, std::size_t NI, std::size_t NO, class Ex, class F, bool S, std::size_t... J,
          std::size_t... K>
void run_apply_seq(Ex const &ex, kernel<F, S> const &k, view<T const> const *in, view<T> const *out,
                   std::index_sequence<J...>, std::index_sequence<K...>) {
  dualcast::apply(ex, k, dualcast::out(out[K]...), in[J]...);
}

// The kernel's outputs: out[0 .. NO) from in[0 .. NI).
template <class T, class Ex, class F, bool S>
void run_apply(Ex const &ex, kernel<F, S> const &k, view<T const> const *in, view<T> const *out) {
  constexpr int NI = kernel_arity<F, float>();
  constexpr int NO = outputs_of_views<F, float>(std::make_index_sequence<NI>{});
  run_apply_seq<T, NI, NO>(ex, k, in, out, std::make_index_sequence<NI>{},
                           std::make_index_sequence<NO>{});
}

// The cotangents xbar[a] of the differentiable arguments whose bit is set in sub (a mask over
// differentiable_positions), or of all of them where there are more than max_subset_inputs
// (xbar must then hold all of them: interop::effective_mask), from ybar[0 .. NO).
template <int NI, int NO, unsigned ND, class T, class Ex, class F, bool S>
void run_vjp_subset(Ex const &ex, kernel<F, S> const &k, unsigned sub, view<T const> const *in,
                    view<T> const *xbar, view<T const> const *ybar) {
  constexpr auto diff = differentiable_positions<NI, ND>();
  with_active_subset_at<diff>(
      sub, [&]<int C, int... A>(active_set<C, A...> act) {
        [&]<std::size_t... J, std::size_t... K>(std::index_sequence<J...>,
                                                std::index_sequence<K...>) {
          dualcast::vjp(ex, k, act, dualcast::out(xbar[A]...), dualcast::in(in[J]...),
                        dualcast::in(ybar[K]...));
        }
        (std::make_index_sequence<NI>{}, std::make_index_sequence<NO>{});
      });
}

// The CUDA half of one kernel's operators, per element type: launches on a cudaStream_t given as
// void * (torch's current stream), arguments as in run_apply / run_vjp_subset.
template <class T> struct cuda_calls_of {
  void (*apply)(void *stream, view<T const> const *in, view<T> const *out) = nullptr;
  void (*vjp)(void *stream, unsigned sub, view<T const> const *in, view<T> const *xbar,
              view<T const> const *ybar) = nullptr;
};
struct cuda_calls {
  cuda_calls_of<float> f;
  cuda_calls_of<double> d;
  template <class T> cuda_calls_of<T> const &of() const {
    if constexpr (std::is_same_v<T, float>)
      return f;
    else
      return d;
  }
};

// The library's CUDA calls by qualified operator name (filled at load by
// DUALCAST_TORCH_CUDA_KERNEL, read at call time; hidden: one table per shared library).
DUALCAST_INTEROP_HIDDEN inline std::map<std::string, cuda_calls> &cuda_registry() {
  static std::map<std::string, cuda_calls> r;
  return r;
}

} // namespace detail
} // namespace dualcast::interop
