// dualcast/math/branch.hpp: branch(c, then_f, else_f) -- then_f() where c holds, else else_f(),
// per element, at the cost of the side taken where a SIMD batch's lanes agree and at select's
// cost where they disagree.
//
// An `if` on a SIMD mask is exact too (numbers/simd.hpp): a batch whose lanes disagree is
// evaluated once per path, the kernel run again from its start for each, and the results blended
// (backend/cpu/map.hpp). That repeats whatever the paths share -- the HM-LSTM update's
// sigmoid(i) * tanh(g) is computed by FLUSH and by UPDATE -- and a batch taking all three of its
// paths ran 1.9x the branch-free select formulation (bench/divergence). branch() instead tests the
// running lanes with one movemask: all true, then_f() alone; none, else_f() alone; mixed, both on
// the whole batch and select -- select's results bit for bit, with no re-evaluation and no
// per-lane work. Values computed before the branch are shared by both sides, as in select.
// On plain numbers (one element at a time, and on a GPU, where a warp's threads diverge anyway)
// it is `c ? then_f() : else_f()`. The result has select's type (duals and sparse duals joined).
#pragma once

#include <dualcast/core/config.hpp>
#include <dualcast/math/dual.hpp>
#include <dualcast/math/scalar.hpp>
#include <dualcast/math/sparse_dual.hpp>
#include <dualcast/numbers/simd.hpp>
#if DUALCAST_HAS_SIMD
#include <dualcast/math/simd.hpp>
#endif

#include <cstdint>

namespace dualcast {

template <class C, class Then, class Else>
DUALCAST_HD DUALCAST_FORCEINLINE auto branch(C const &c, Then const &then_f, Else const &else_f) {
  using R = decltype(select(c, then_f(), else_f()));
  if constexpr (requires { c.bits(); }) { // a SIMD mask
    // The lanes of the running path (an `if` before may have split the batch): the others'
    // results are blended away by the backend, so they need not decide anything here.
    detail::lane_paths const &p = detail::current_lane_paths();
    std::uint32_t const run = p.active ? p.lanes : C::all_bits;
    std::uint32_t const t = c.bits() & run;
    if (t != run && t != 0) [[likely]]
      return R(select(c, then_f(), else_f()));
    if (t == run)
      return R(then_f());
    return R(else_f());
  } else {
    if (static_cast<bool>(c))
      return R(then_f());
    return R(else_f());
  }
}

} // namespace dualcast
