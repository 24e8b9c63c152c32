// dualcast/ops/fused/cost_model.hpp: which policy a fused node takes under policy::automatic.
//
// Bytes moved (n = elements of the call's shape, s = sizeof(T), K outputs, A inputs that require
// gradients, I = bytes of the array inputs):
//   store     moves 2 * K * A * n * s extra bytes: K*A partial arrays written in forward and read
//             again in backward (and held in memory in between);
//   recompute moves I + K * n * s extra bytes: the inputs are re-read in backward, and the dual
//             re-evaluation of the lambda is charged as one output array per output (its
//             arithmetic; transcendental-heavy lambdas make this an underestimate).
//   Both read the K output cotangents and write the A input cotangents; that is not counted.
//   store is chosen iff its bytes are <= recompute's. Examples: sigmoid (K=1, A=1): 2n vs 2n ->
//   store; x * y (K=1, A=2): 4n vs 3n -> recompute; an LSTM cell (K=2, A=5): 20n vs 7n ->
//   recompute.
//
// Compile time: the store node instantiates a kernel with one partial array per (output,
// variable) pair and a contraction over all of them, which grows with K * A (22 inputs and 5
// outputs: 110 arrays). Under policy::automatic it is compiled only for kernels of at most
// store_auto_max_partials partial arrays; wider kernels recompute (the cost model rarely picks
// store for them anyway) unless a call asks for policy::store.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/tape/policy.hpp>

#include <cstddef>

namespace dualcast::detail {

inline constexpr int store_auto_max_partials = 16;

// Which nodes a call with policy P, K outputs and NA variables compiles.
template <policy_kind P, int K, int NA> struct compiled_nodes {
  static constexpr bool store =
      P == policy_kind::store || (P == policy_kind::automatic && K * NA <= store_auto_max_partials);
  static constexpr bool recompute = P != policy_kind::store;
};

// The cost model (see the file comment): true when storing the partials moves fewer bytes.
inline bool store_is_cheaper(int K, int A, index_t n, std::size_t elem, std::size_t input_bytes) {
  double store = 2.0 * K * A * double(n) * double(elem);
  double recompute = double(input_bytes) + double(K) * double(n) * double(elem);
  return store <= recompute;
}

// The policy a node takes: the call's, else the tape's default, else the cost model's; store only
// where the store node is compiled.
inline policy_kind choose_policy(policy_kind call, policy_kind tape_default, bool store_compiled,
                                 int K, int A, index_t n, std::size_t elem,
                                 std::size_t input_bytes) {
  policy_kind p = call != policy_kind::automatic ? call : tape_default;
  if (p == policy_kind::automatic)
    p = store_is_cheaper(K, A, n, elem, input_bytes) ? policy_kind::store : policy_kind::recompute;
  if (p == policy_kind::store && !store_compiled)
    p = policy_kind::recompute;
  return p;
}

} // namespace dualcast::detail
