// dualcast/tape/policy.hpp: how a fused elementwise node gives backward its diagonal Jacobian.
//
//   dualcast::fused(dualcast::policy::recompute, k, x, y);   // chosen at compile time
//   tape.default_policy = dualcast::policy::store;           // a tape's default, at run time
//
// The policies are tag values of distinct types, so that a call's policy is known at compile
// time and the branch it does not take is never instantiated (a wide kernel's store node, with
// one partial array per (output, input) pair, is what makes it slow to compile). Each converts to
// policy_kind, the run-time value a tape keeps as its default.
#pragma once

#include <cstdint>
#include <type_traits>

namespace dualcast {

enum class policy_kind : std::uint8_t {
  automatic, // chosen by the cost model (ops/fused/cost_model.hpp)
  store,     // forward writes the partials d y_k / d x_a; backward contracts them
  recompute, // forward stores nothing extra; backward re-evaluates duals (dualcast::vjp)
};

namespace policy {
template <policy_kind K> struct tag {
  static constexpr policy_kind kind = K;
  constexpr operator policy_kind() const { return K; } // NOLINT(google-explicit-constructor)
};
inline constexpr tag<policy_kind::automatic> automatic{};
inline constexpr tag<policy_kind::store> store{};
inline constexpr tag<policy_kind::recompute> recompute{};
} // namespace policy

template <class P> struct is_policy : std::false_type {};
template <policy_kind K> struct is_policy<policy::tag<K>> : std::true_type {};
template <class P> inline constexpr bool is_policy_v = is_policy<std::remove_cvref_t<P>>::value;

} // namespace dualcast
