// dualcast/broadcast/detail/call_checks.hpp: the run-time checks of a fused call, all made before
// anything is written: the arguments broadcast together and to the outputs' shape, outputs have
// that shape and distinct elements, and no output overlaps an input it is not exactly. Messages
// name the call, the argument positions and the shapes.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/arrays/view.hpp>
#include <dualcast/arrays/view_overlap.hpp>
#include <dualcast/core/compiled.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/kernel/kernel.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>

namespace dualcast::detail {

inline std::string role_name(char const *role, int i) {
  return std::string(role) + " " + std::to_string(i);
}

// The array arguments of a call: each a read-only view of the call's element type, with its
// argument position. Collected once, so that every check and the launch plan loop over an array
// instead of expanding the argument pack again (which made wide kernels slow to compile).
template <class T, std::size_t N> struct array_args {
  static constexpr std::size_t size = N;
  std::array<view<T const>, N> views{};
  std::array<int, N> pos{};
};
template <class T, class... A> auto collect_arrays(A const &...a) {
  array_args<T, (0 + ... + std::size_t(is_view_v<A>))> r;
  std::size_t n = 0;
  int p = 0;
  auto one = [&](auto const &x) {
    if constexpr (is_view_v<decltype(x)>) {
      r.views[n] = view<T const>(x);
      r.pos[n++] = p;
    }
    ++p;
  };
  (one(a), ...);
  return r;
}

template <class T>
void check_output(char const *op, char const *role, int i, view<T> const &v, shape const &s) {
  if (!(v.dims() == s))
    throw shape_error(std::string(op) + ": " + role_name(role, i) + " has shape " +
                      to_string(v.dims()) + " but the call's shape is " + to_string(s));
  // (An empty array writes nothing; its row-major strides may be 0 before a zero extent.)
  for (int d = 0; d < v.rank() && v.size() > 0; ++d)
    if (v.extent(d) > 1 && v.stride(d) == 0)
      throw aliasing_error(std::string(op) + ": " + role_name(role, i) +
                           " has stride 0 in dimension " + std::to_string(d) +
                           ", so several elements would be written to one place");
}

// The broadcast shape of n array arguments (positions pos, for messages).
template <class T>
shape broadcast_args(char const *op, view<T const> const *v, int const *pos, std::size_t n) {
  return broadcast_shapes(
      op, [v](int i) -> shape const & { return v[i].dims(); }, pos, int(n));
}
template <class T, std::size_t N> shape broadcast_args(char const *op, array_args<T, N> const &a) {
  return broadcast_args(op, a.views.data(), a.pos.data(), N);
}

// Every array argument broadcasts to the call's shape s (s_in: theirs broadcast together).
template <class T>
void check_fits(char const *op, view<T const> const *v, int const *pos, std::size_t n,
                shape const &s_in, shape const &s) {
  bool ok = true;
  shape b = broadcast_pair(s_in, s, ok);
  if (ok && b == s)
    return;
  for (std::size_t i = 0; i < n; ++i) {
    bool fits = true;
    shape bx = broadcast_pair(v[i].dims(), s, fits);
    if (!fits || !(bx == s))
      throw shape_error(std::string(op) + ": argument " + std::to_string(pos[i]) + " of shape " +
                        to_string(v[i].dims()) + " does not broadcast to the output shape " +
                        to_string(s));
  }
}

// Outputs must not overlap each other, nor overlap an input unless they are that same input.
template <class T>
void check_aliasing(char const *op, view<T> const *outs, char const *const *roles, int const *idx,
                    std::size_t n_out, view<T const> const *v, int const *pos, std::size_t n,
                    shape const &s) {
  range_table ro(outs, n_out), ri(v, n);
  for (std::size_t i = 0; i < n_out; ++i) {
    bool const meets_out = ro.any_meets(ro[i], i), meets_in = ri.any_meets(ro[i], n);
    for (std::size_t j = 0; j < i && meets_out; ++j)
      if (ranges_meet(ro[i], ro[j]) && overlaps(outs[i], outs[j]))
        throw aliasing_error(std::string(op) + ": " + role_name(roles[i], idx[i]) + " overlaps " +
                             role_name(roles[j], idx[j]));
    for (std::size_t a = 0; a < n && meets_in; ++a)
      if (ranges_meet(ro[i], ri[a]) && overlaps(outs[i], v[a]) && !same_elements(outs[i], v[a], s))
        throw aliasing_error(std::string(op) + ": " + role_name(roles[i], idx[i]) +
                             " overlaps argument " + std::to_string(pos[a]) +
                             " without being the same elements; write to separate memory");
  }
}

// Shapes, fit and aliasing of a call's array arguments against its outputs (shape s). Out of line:
// one instance per element type, whatever the number of arguments.
template <class T>
[[gnu::noinline]] void check_call(char const *op, view<T const> const *v, int const *pos,
                                  std::size_t n, view<T> const *outs, char const *const *roles,
                                  int const *idx, std::size_t n_out, shape const &s) {
  shape s_in = broadcast_args(op, v, pos, n);
  check_fits(op, v, pos, n, s_in, s);
  for (std::size_t i = 0; i < n_out; ++i)
    check_output(op, roles[i], idx[i], outs[i], s);
  check_aliasing(op, outs, roles, idx, n_out, v, pos, n, s);
}
template <class T, std::size_t N, std::size_t NO>
void check_call(char const *op, array_args<T, N> const &a, std::array<view<T>, NO> const &outs,
                char const *const (&roles)[NO], int const (&idx)[NO], shape const &s) {
  check_call(op, a.views.data(), a.pos.data(), N, outs.data(), roles, idx, NO, s);
}

// The shape of the argument at position p among the array arguments.
template <class T>
shape const &shape_at(view<T const> const *v, int const *pos, std::size_t n, int p) {
  for (std::size_t i = 0; i < n; ++i)
    if (pos[i] == p)
      return v[i].dims();
  throw shape_error("dualcast: argument " + std::to_string(p) + " is not an array");
}

// jvp: each input tangent has its input's shape, and no output overlaps a tangent unless it is
// the same elements.
template <class T>
[[gnu::noinline]] void check_tangents(char const *op, view<T const> const *v, int const *pos,
                                      std::size_t n, int const *active, view<T const> const *tin,
                                      std::size_t n_active, view<T> const *outs, std::size_t n_out,
                                      char const *const *roles, int const *idx, shape const &s) {
  for (std::size_t a = 0; a < n_active; ++a) {
    shape const &xs = shape_at(v, pos, n, active[a]);
    if (!(tin[a].dims() == xs))
      throw shape_error(std::string(op) + ": tangent " + std::to_string(a) + " has shape " +
                        to_string(tin[a].dims()) + " but argument " + std::to_string(active[a]) +
                        " has shape " + to_string(xs));
  }
  range_table ro(outs, n_out), rt(tin, n_active);
  for (std::size_t i = 0; i < n_out; ++i)
    for (std::size_t a = 0; a < n_active; ++a)
      if (ranges_meet(ro[i], rt[a]) && overlaps(outs[i], tin[a]) &&
          !same_elements(outs[i], tin[a], s))
        throw aliasing_error(std::string(op) + ": " + role_name(roles[i], idx[i]) +
                             " overlaps tangent " + std::to_string(a) +
                             " without being the same elements; write to separate memory");
}
template <class T, std::size_t N>
void check_tangents(char const *op, array_args<T, N> const &a, int const *active,
                    view<T const> const *tin, std::size_t n_active, view<T> const *outs,
                    std::size_t n_out, char const *const *roles, int const *idx, shape const &s) {
  check_tangents(op, a.views.data(), a.pos.data(), N, active, tin, n_active, outs, n_out, roles,
                 idx, s);
}

// vjp: the iteration shape (inputs and output cotangents broadcast together); each input
// cotangent xv[a] has the shape of its input, and direct[a] says whether that is the iteration
// shape (else the input was broadcast: its cotangent is summed over the broadcast dimensions
// afterwards). No cotangent overlaps an input or (when written in the pass) an output cotangent
// unless it is the same elements.
template <class T>
[[gnu::noinline]] shape check_vjp(char const *op, view<T const> const *v, int const *pos,
                                  std::size_t n, int const *active, view<T> const *xv,
                                  std::size_t n_active, view<T const> const *yv, std::size_t k,
                                  bool *direct) {
  shape s_in = broadcast_args(op, v, pos, n);
  shape s = s_in;
  for (std::size_t i = 0; i < k; ++i) {
    bool ok = true;
    s = broadcast_pair(s, yv[i].dims(), ok);
    if (!ok)
      throw shape_error(std::string(op) + ": output cotangent " + std::to_string(i) + " of shape " +
                        to_string(yv[i].dims()) + " does not broadcast with the inputs' shape " +
                        to_string(s_in));
  }
  for (std::size_t a = 0; a < n_active; ++a) {
    shape const &xs = shape_at(v, pos, n, active[a]);
    if (!(xv[a].dims() == xs))
      throw shape_error(std::string(op) + ": input cotangent " + std::to_string(a) + " has shape " +
                        to_string(xv[a].dims()) + " but argument " + std::to_string(active[a]) +
                        " has shape " + to_string(xs));
    direct[a] = xs == s;
    for (int d = 0; d < xv[a].rank() && xv[a].size() > 0; ++d)
      if (xv[a].extent(d) > 1 && xv[a].stride(d) == 0)
        throw aliasing_error(std::string(op) + ": input cotangent " + std::to_string(a) +
                             " has stride 0 in dimension " + std::to_string(d));
  }
  range_table rx(xv, n_active), ri(v, n), ry(yv, k);
  for (std::size_t i = 0; i < n_active; ++i) {
    bool const meets_x = rx.any_meets(rx[i], i), meets_in = ri.any_meets(rx[i], n),
               meets_y = direct[i] && ry.any_meets(rx[i], k);
    for (std::size_t j = 0; j < i && meets_x; ++j)
      if (ranges_meet(rx[i], rx[j]) && overlaps(xv[i], xv[j]))
        throw aliasing_error(std::string(op) + ": " + role_name("input cotangent", int(i)) +
                             " overlaps " + role_name("input cotangent", int(j)));
    for (std::size_t a = 0; a < n && meets_in; ++a)
      if (ranges_meet(rx[i], ri[a]) && overlaps(xv[i], v[a]) && !same_elements(xv[i], v[a], s))
        throw aliasing_error(std::string(op) + ": " + role_name("input cotangent", int(i)) +
                             " overlaps argument " + std::to_string(pos[a]) +
                             " without being the same elements; write to separate memory");
    // Written while the output cotangents are read (those of broadcast inputs are written after
    // the pass, by the reduction).
    for (std::size_t j = 0; j < k && meets_y; ++j)
      if (ranges_meet(rx[i], ry[j]) && overlaps(xv[i], yv[j]) && !same_elements(xv[i], yv[j], s))
        throw aliasing_error(std::string(op) + ": input cotangent " + std::to_string(i) +
                             " overlaps output cotangent " + std::to_string(j) +
                             " without being the same elements; write to separate memory");
  }
  return s;
}
// value_and_vjp, beyond its values' own checks (check_output, check_aliasing against the inputs):
// no value output y overlaps an input cotangent xv, nor an output cotangent yv unless it is the
// same elements (the pass reads those while it writes the values).
template <class T>
[[gnu::noinline]] void check_vjp_values(char const *op, view<T> const *y, std::size_t k,
                                        view<T> const *xv, std::size_t n_active,
                                        view<T const> const *yv, shape const &s) {
  range_table ro(y, k), rx(xv, n_active), ry(yv, k);
  for (std::size_t i = 0; i < k; ++i) {
    for (std::size_t a = 0; a < n_active; ++a)
      if (ranges_meet(ro[i], rx[a]) && overlaps(y[i], xv[a]))
        throw aliasing_error(std::string(op) + ": " + role_name("output", int(i)) + " overlaps " +
                             role_name("input cotangent", int(a)));
    for (std::size_t j = 0; j < k; ++j)
      if (ranges_meet(ro[i], ry[j]) && overlaps(y[i], yv[j]) && !same_elements(y[i], yv[j], s))
        throw aliasing_error(std::string(op) + ": " + role_name("output", int(i)) +
                             " overlaps output cotangent " + std::to_string(j) +
                             " without being the same elements; write to separate memory");
  }
}

// ---- flat calls ------------------------------------------------------------------------------
// A call whose arrays are all contiguous with the call's shape (len elements) -- the usual node of
// a small-array recurrence -- is checked on pointers: its shapes agree by construction, and two
// such arrays share an element iff their address intervals meet, the same elements iff they start
// at the same address. An operand given with stride 0 (a broadcast scalar: a missing output
// cotangent) occupies one element.
struct flat_interval {
  std::uintptr_t lo, hi;
};
template <class T> flat_interval flat_interval_of(T const *p, index_t len, index_t stride = 1) {
  auto lo = reinterpret_cast<std::uintptr_t>(p);
  return {lo, lo + std::uintptr_t(len == 0 ? 0 : stride == 0 ? 1 : len) * sizeof(T)};
}
inline bool intervals_meet(flat_interval a, flat_interval b) {
  return (a.lo < b.hi) & (b.lo < a.hi);
}
// The rule a flat write w breaks against an array r: they share an element and r is not an array
// the write may be (same_ok: 1 where r may be the very elements written, starting at w's address).
// Branch-free, on integers: the first pass below runs it over arrays, vectorised.
inline std::uintptr_t flat_write_breaks(flat_interval w, flat_interval r, std::uintptr_t same_ok) {
  return std::uintptr_t(intervals_meet(w, r)) & (std::uintptr_t(r.lo != w.lo) | (same_ok ^ 1));
}

#if !defined(__CUDACC__)
// Four 64-bit lanes, how the flat checks below keep address intervals (vector constants: not for
// nvcc's front end, see flat_writes_meet).
typedef std::int64_t int64x4 __attribute__((vector_size(sizeof(std::int64_t) * 4)));
// Element m of the array v (kept as whole vectors of four) set to x by ONE store of its whole
// vector, the lanes after m zero (they meet nothing) when m starts a vector. The checks read the
// vectors back right after writing them; a vector load that needs a vector store and a later
// scalar store into it waits until both retire (a store-forwarding stall: about 5 % of the
// GradBench lstm jacobian, in these checks, issue 36), one from a single store of its size does
// not. Built in registers: the lane selected by a mask, not by an index (which goes through
// memory).
inline void put_lane(std::int64_t *v, std::size_t m, std::int64_t x) {
  std::size_t const g = m & ~std::size_t(3);
  int64x4 cur{};
  if (m != g)
    std::memcpy(&cur, v + g, sizeof cur);
  int64x4 const lane = int64x4{0, 1, 2, 3} == std::int64_t(m - g); // (-1 in lane m - g)
  cur = (cur & ~lane) | ((int64x4{} + x) & lane);
#if defined(__x86_64__) || defined(__i386__)
  __asm__("" : "+x"(cur)); // (whole: else GCC stores the one lane, a masked store, as stalling)
#endif
  std::memcpy(v + g, &cur, sizeof cur);
}
#endif

// Whether x is among p[0], ..., p[n - 1]: four pointers to a compare where the compiler can (a
// fused node asks this of each argument against those before it: 66 pairs of 12 arguments, as a
// scalar loop some 300 instructions per node, issue 36).
template <class P> bool among(P const *p, std::size_t n, P x) {
  static_assert(std::is_pointer_v<P> && sizeof(void *) == sizeof(std::int64_t));
  std::size_t i = 0;
  bool found = false;
#if !defined(__CUDACC__)
  int64x4 any{};
  std::int64_t xi;
  std::memcpy(&xi, &x, sizeof xi);
  int64x4 const xv = int64x4{} + xi;
  for (; i + 4 <= n; i += 4) {
    int64x4 v;
    std::memcpy(&v, p + i, sizeof v);
    any |= v == xv;
  }
  found = (any[0] | any[1] | any[2] | any[3]) != 0;
#endif
  for (; i < n; ++i)
    found |= p[i] == x;
  return found;
}

// Whether any of check_flat_writes' rules may be broken, as one branch-free loop per write over the
// intervals before it (arguments, read cotangents, earlier writes): a node of the D-LSTM checks
// about 300 pairs, and as pairs of structs this pass took 6 % of its gradient. The intervals are
// kept four to a vector (unused lanes empty: they meet nothing) and the answer per lane until the
// end; left to the vectoriser, the same loop had a remainder loop and a reduction per write, or
// was vectorised across writes with shuffles, costing more than the pairs themselves (5-7 % of
// the GradBench lstm jacobian). Addresses compare as signed integers (user-space addresses are
// below 2^63; AVX2 has no unsigned 64-bit compare). writes_apart: the caller has made sure that
// no two writes share an element, so they are not compared with one another.
template <class T>
bool flat_writes_meet(T const *const *v, std::size_t n, T *const *w, std::size_t n_w,
                      T const *const *yv, index_t const *ystride, std::size_t k, index_t len,
                      bool writes_apart = false) {
  constexpr std::size_t max = 96;
  if (n + k + n_w > max) // more than any kernel has seen: the naming pass decides
    return true;
#if defined(__CUDACC__)
  // (nvcc's front end, which re-emits host code as C++ for the host compiler, stops with an
  // internal error on vector constants: there the pairs one by one, by the same rule)
  std::uintptr_t any = 0;
  for (std::size_t i = 0; i < n_w; ++i) {
    flat_interval const r = flat_interval_of<T>(w[i], len);
    for (std::size_t j = 0; j < i && !writes_apart; ++j)
      any |= flat_write_breaks(r, flat_interval_of<T>(w[j], len), 0);
    for (std::size_t a = 0; a < n; ++a)
      any |= flat_write_breaks(r, flat_interval_of(v[a], len), 1);
    for (std::size_t j = 0; j < k; ++j)
      any |= flat_write_breaks(r, flat_interval_of(yv[j], len, ystride[j]), ystride[j] == 1);
  }
  return any != 0;
#else
  constexpr std::size_t lanes = 4;
  using lanes_t = int64x4;
  alignas(sizeof(lanes_t)) std::int64_t lo[max + lanes], hi[max + lanes], same_ok[max + lanes];
  std::size_t m = 0;
  auto add = [&](flat_interval r, bool ok) {
    put_lane(lo, m, std::int64_t(r.lo)), put_lane(hi, m, std::int64_t(r.hi));
    put_lane(same_ok, m, ok ? -1 : 0);
    ++m;
  };
  for (std::size_t a = 0; a < n; ++a)
    add(flat_interval_of(v[a], len), true);
  for (std::size_t j = 0; j < k; ++j)
    add(flat_interval_of(yv[j], len, ystride[j]), ystride[j] == 1);
  lanes_t met{};
  for (std::size_t i = 0; i < n_w; ++i) {
    flat_interval const f = flat_interval_of<T>(w[i], len);
    lanes_t const rlo = lanes_t{} + std::int64_t(f.lo), rhi = lanes_t{} + std::int64_t(f.hi);
    for (std::size_t g = 0; g < m; g += lanes) {
      lanes_t l, h, ok; // (copied, not returned: a vector return value changes the ABI)
      std::memcpy(&l, lo + g, sizeof l), std::memcpy(&h, hi + g, sizeof h);
      std::memcpy(&ok, same_ok + g, sizeof ok);
      met |= (rlo < h) & (l < rhi) & ((l != rlo) | ~ok);
    }
    if (!writes_apart)
      add(f, false);
  }
  std::int64_t any = 0;
  for (std::size_t q = 0; q < lanes; ++q)
    any |= met[q];
  return any != 0;
#endif
}

// The aliasing rules of a flat call's writes w (named `role`: outputs, input cotangents): no w
// overlaps another, nor an input (v) or a read cotangent (yv, stride ystride[j]: 0 or 1) unless
// it is that array. One branch-free pass answers whether any rule is broken (the usual answer:
// no); only then does the pass that names the culprit, with check_call's / check_vjp's message
// (and returns quietly if the first pass could not tell and nothing is broken).
template <class T>
[[gnu::noinline]] void check_flat_writes(char const *op, char const *role, T const *const *v,
                                         int const *pos, std::size_t n, T *const *w,
                                         std::size_t n_w, T const *const *yv,
                                         index_t const *ystride, std::size_t k, index_t len) {
  if (!flat_writes_meet(v, n, w, n_w, yv, ystride, k, len)) [[likely]]
    return;
  auto fail = [&](std::size_t i, std::string const &what) {
    throw aliasing_error(std::string(op) + ": " + role_name(role, int(i)) + what);
  };
  for (std::size_t i = 0; i < n_w; ++i) {
    flat_interval const r = flat_interval_of<T>(w[i], len);
    for (std::size_t j = 0; j < i; ++j)
      if (flat_write_breaks(r, flat_interval_of<T>(w[j], len), 0))
        fail(i, " overlaps " + role_name(role, int(j)));
    for (std::size_t a = 0; a < n; ++a)
      if (flat_write_breaks(r, flat_interval_of(v[a], len), 1))
        fail(i, " overlaps argument " + std::to_string(pos[a]) +
                    " without being the same elements; write to separate memory");
    for (std::size_t j = 0; j < k; ++j)
      if (flat_write_breaks(r, flat_interval_of(yv[j], len, ystride[j]), ystride[j] == 1))
        fail(i, " overlaps output cotangent " + std::to_string(j) +
                    " without being the same elements; write to separate memory");
  }
}
// check_call's aliasing rules for a flat call, and check_vjp's.
template <class T>
void check_flat_call(char const *op, T const *const *v, int const *pos, std::size_t n,
                     T *const *outs, std::size_t n_out, index_t len) {
  check_flat_writes<T>(op, "output", v, pos, n, outs, n_out, nullptr, nullptr, 0, len);
}
template <class T>
void check_flat_vjp(char const *op, T const *const *v, int const *pos, std::size_t n, T *const *xv,
                    std::size_t n_active, T const *const *yv, index_t const *ystride, std::size_t k,
                    index_t len) {
  check_flat_writes<T>(op, "input cotangent", v, pos, n, xv, n_active, yv, ystride, k, len);
}

template <class T, std::size_t N>
shape check_vjp(char const *op, array_args<T, N> const &a, int const *active, view<T> const *xv,
                std::size_t n_active, view<T const> const *yv, std::size_t k, bool *direct) {
  return check_vjp(op, a.views.data(), a.pos.data(), N, active, xv, n_active, yv, k, direct);
}

// The compiled component's instantiations (dualcast/core/compiled.hpp).
#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE shape broadcast_args<T>(char const *, view<T const> const *, int const *,   \
                                               std::size_t);                                       \
  DUALCAST_INSTANTIATE void check_output<T>(char const *, char const *, int, view<T> const &,      \
                                            shape const &);                                        \
  DUALCAST_INSTANTIATE void check_fits<T>(char const *, view<T const> const *, int const *,        \
                                          std::size_t, shape const &, shape const &);              \
  DUALCAST_INSTANTIATE void check_aliasing<T>(char const *, view<T> const *, char const *const *,  \
                                              int const *, std::size_t, view<T const> const *,     \
                                              int const *, std::size_t, shape const &);            \
  DUALCAST_INSTANTIATE void check_call<T>(char const *, view<T const> const *, int const *,        \
                                          std::size_t, view<T> const *, char const *const *,       \
                                          int const *, std::size_t, shape const &);                \
  DUALCAST_INSTANTIATE void check_tangents<T>(char const *, view<T const> const *, int const *,    \
                                              std::size_t, int const *, view<T const> const *,     \
                                              std::size_t, view<T> const *, std::size_t,           \
                                              char const *const *, int const *, shape const &);    \
  DUALCAST_INSTANTIATE shape check_vjp<T>(char const *, view<T const> const *, int const *,        \
                                          std::size_t, int const *, view<T> const *, std::size_t,  \
                                          view<T const> const *, std::size_t, bool *);             \
  DUALCAST_INSTANTIATE void check_vjp_values<T>(char const *, view<T> const *, std::size_t,        \
                                                view<T> const *, std::size_t,                      \
                                                view<T const> const *, shape const &);             \
  DUALCAST_INSTANTIATE void check_flat_writes<T>(                                                  \
      char const *, char const *, T const *const *, int const *, std::size_t, T *const *,          \
      std::size_t, T const *const *, index_t const *, std::size_t, index_t);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X

} // namespace dualcast::detail
