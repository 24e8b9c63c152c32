// dualcast/interop/active_subsets.hpp: a run-time choice of the inputs to differentiate, turned
// into the compile-time active set that dualcast::vjp / jvp / apply take.
//
//   // a framework says at run time which of 5 array inputs need gradients (bit a: input a)
//   dualcast::interop::with_active_subset<5>(mask, [&](auto active) {
//     // active: dualcast::active_set<default_chunk, a...> with the positions of mask's bits
//     run_vjp(active);
//   });
//
// Only the inputs that need gradients become duals, so a vjp with one input of five requested
// carries one partial instead of five. Each mask needs its own instantiation of the kernel's
// element operation: with up to max_subset_inputs array inputs every non-empty subset is
// instantiated (2^N - 1 of them); above that the call falls back to every input active, and the
// caller computes the unwanted cotangents into scratch (one instantiation). Framework-independent:
// both the torch and the XLA FFI layers use it.
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/kernel/detail/element_ops.hpp>

#include <array>
#include <string>
#include <utility>

namespace dualcast::interop {

// Up to this many array inputs every subset gets its own instantiation (31 for 5 inputs); a
// kernel with more inputs runs with all of them active (measured in docs/interop.md: each
// instantiation of a cell's vjp costs about a second of compile time).
inline constexpr int max_subset_inputs = 5;

namespace detail {

template <int N> constexpr unsigned all_mask() { return N >= 32 ? ~0u : (1u << N) - 1u; }

template <unsigned Mask, int N> constexpr int bit_count() {
  int c = 0;
  for (int a = 0; a < N; ++a)
    c += (Mask >> a) & 1u;
  return c;
}

// The positions of Mask's set bits, in increasing order.
template <unsigned Mask, int N> constexpr auto mask_positions() {
  std::array<int, static_cast<std::size_t>(bit_count<Mask, N>() > 0 ? bit_count<Mask, N>() : 1)>
      p{};
  int c = 0;
  for (int a = 0; a < N; ++a)
    if ((Mask >> a) & 1u)
      p[static_cast<std::size_t>(c++)] = a;
  return p;
}

template <int N> constexpr std::array<int, N> identity_positions() {
  std::array<int, N> p{};
  for (int a = 0; a < N; ++a)
    p[static_cast<std::size_t>(a)] = a;
  return p;
}

// Bit j of Mask stands for argument position Pos[j].
template <unsigned Mask, auto Pos, int C, std::size_t... J>
constexpr auto mask_active_set(std::index_sequence<J...>) {
  constexpr int N = static_cast<int>(Pos.size());
  constexpr auto p = mask_positions<Mask, N>();
  return active_set<C, Pos[static_cast<std::size_t>(p[J])]...>{};
}

template <auto Pos, int C, unsigned Mask>
using mask_active_t = decltype(mask_active_set<Mask, Pos, C>(
    std::make_index_sequence<bit_count<Mask, static_cast<int>(Pos.size())>()>{}));

template <auto Pos, int C, class F, unsigned... M>
void dispatch_mask(unsigned mask, F &&f, std::integer_sequence<unsigned, M...>) {
  // One comparison per subset; the masks are few (at most 31), so a table buys nothing.
  bool done = ((mask == M + 1u ? (f(mask_active_t<Pos, C, M + 1u>{}), true) : false) || ...);
  (void)done;
}

} // namespace detail

// Whether a kernel with N array inputs gets one instantiation per subset (else all-active).
template <int N> inline constexpr bool subsets_instantiated = N <= max_subset_inputs;

// The mask that with_active_subset<N> really runs for `mask`: mask itself, or every input where
// N > max_subset_inputs (the caller then needs scratch cotangents for the bits it did not ask
// for).
template <int N> constexpr unsigned effective_mask(unsigned mask) {
  return subsets_instantiated<N> ? mask : detail::all_mask<N>();
}

// Calls f(active_set<C, Pos[j]...>{}) where j... are the set bits of mask, for
// 0 < mask < 2^N (N = Pos.size(): the argument positions that may be differentiated, e.g. all but
// a kernel's masks); with N > max_subset_inputs f gets all of Pos active. The empty mask has
// nothing to differentiate: the caller skips the call (index_error here).
template <auto Pos, int C = default_chunk, class F>
void with_active_subset_at(unsigned mask, F &&f) {
  constexpr int N = static_cast<int>(Pos.size());
  static_assert(N >= 1 && N < 32, "dualcast::interop: between 1 and 31 array inputs");
  if (mask == 0u || (mask & ~detail::all_mask<N>()) != 0u)
    throw index_error("dualcast::interop::with_active_subset: mask " + std::to_string(mask) +
                      " names no input or an input beyond the " + std::to_string(N) + " there are");
  if constexpr (subsets_instantiated<N>)
    detail::dispatch_mask<Pos, C>(mask, f,
                                  std::make_integer_sequence<unsigned, detail::all_mask<N>()>{});
  else
    f(detail::mask_active_t<Pos, C, detail::all_mask<N>()>{});
}

// The same with bit a standing for array input a (positions 0 .. N-1).
template <int N, int C = default_chunk, class F> void with_active_subset(unsigned mask, F &&f) {
  with_active_subset_at<detail::identity_positions<N>(), C>(mask, static_cast<F &&>(f));
}

} // namespace dualcast::interop
