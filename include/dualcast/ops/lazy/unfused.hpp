// dualcast/ops/lazy/unfused.hpp: unfused mode -- classic reverse mode, one node per operation.
//
//   auto y = dualcast::unfused(k, x, w);   // k's lambda on the variables, op by op
//   auto y = dualcast::call(k, x, w);      // fused or unfused by the tape's switch tape::fused
//
// The kernel's lambda is called on the variables themselves, so every operator and math function
// in it builds a lazy expression (ops/lazy/operators.hpp); those are then evaluated node by node,
// each operation its own fused node of one to three inputs (a subexpression used twice is
// evaluated once). The same happens to any expression materialised on a tape with
// fused == false. Only lambdas callable on variables (arithmetic and dualcast math, no
// value-dependent branches) can run unfused; fused() accepts any kernel.
#pragma once

#include <dualcast/core/compiled.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/ops/fused.hpp>
#include <dualcast/ops/lazy/expr.hpp>
#include <dualcast/ops/lazy/operators.hpp>
#include <dualcast/ops/lazy/tree.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <unordered_map>
#include <utility>

namespace dualcast {

namespace detail::lz {

// Node-by-node evaluation; memo keeps subexpressions used twice evaluated once.
template <class T> using memo_t = std::unordered_map<std::uint64_t, var<T>>;

// One operation of the node-by-node evaluation as ONE fused node whose kernel is the operation's
// tree on leaves -- the kernel that materialising the same operation on distinct variables
// compiles (ops/lazy/materialize.hpp: x + y, x * 0.5), so that both share one instantiation of
// the fused node and its passes instead of one each (the same arithmetic; no deduplication here,
// as before: x * x is a node of two inputs).
// Host code only: in nvcc translation units the operation keeps its own kernel (kernel<Op>), as
// before -- there the tree kernels of the operand patterns this would add (map_rows /
// map_strided, VJP and partials over two variables) took 8-24-byte stack frames in float, which
// CI's CUDA stage rejects, and the compile time it saves is the host's.
// Not inlined: the compiled component holds the commonest (below).
template <class T, class Tree, class... V>
[[gnu::noinline]] var<T> one_op(Tree const &tree, V const &...v) {
  constexpr int NV = int(sizeof...(V));
  // (direct: the leaves are the arguments in order, no map)
  auto const fn = make_tree_fn<true, NV, 0>(detail::make_tuple(tree), {}, {});
  return dualcast::fused(kernel{fn}, v...);
}
// The operations compiled once in the compiled component (core/compiled.hpp), each a fused node
// that every program using them compiled again: +, -, * and / of two variables or of a variable
// and a scalar, and the commonest functions of a variable. Their nodes are the ones that
// materialising the same operation of leaves compiles too (ops/lazy/materialize.hpp: eval_node).
#define DUALCAST_LAZY_COMPILED_BINARY(X, T) X(T, op_add) X(T, op_sub) X(T, op_mul) X(T, op_div)
#define DUALCAST_LAZY_COMPILED_UNARY(X, T)                                                         \
  X(T, op_neg) X(T, op_exp) X(T, op_log) X(T, op_sqrt) X(T, op_tanh) X(T, op_sigmoid) X(T, op_relu)
#define DUALCAST_X1(T, Op)                                                                         \
  DUALCAST_INSTANTIATE var<T> one_op<T, binary<Op, vleaf<0>, vleaf<1>>, var<T>, var<T>>(           \
      binary<Op, vleaf<0>, vleaf<1>> const &, var<T> const &, var<T> const &);                     \
  DUALCAST_INSTANTIATE var<T> one_op<T, binary<Op, vleaf<0>, sleaf<T>>, var<T>>(                   \
      binary<Op, vleaf<0>, sleaf<T>> const &, var<T> const &);                                     \
  DUALCAST_INSTANTIATE var<T> one_op<T, binary<Op, sleaf<T>, vleaf<0>>, var<T>>(                   \
      binary<Op, sleaf<T>, vleaf<0>> const &, var<T> const &);
#define DUALCAST_X2(T, Op)                                                                         \
  DUALCAST_INSTANTIATE var<T> one_op<T, unary<Op, vleaf<0>>, var<T>>(unary<Op, vleaf<0>> const &,  \
                                                                     var<T> const &);
#define DUALCAST_X(T)                                                                              \
  DUALCAST_LAZY_COMPILED_BINARY(DUALCAST_X1, T) DUALCAST_LAZY_COMPILED_UNARY(DUALCAST_X2, T)
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X
#undef DUALCAST_X2
#undef DUALCAST_X1

template <class T, std::size_t NV, std::size_t NT, int I>
var<T> eager(vleaf<I>, std::array<var<T>, NV> const &vs, std::array<var<T>, NT> const &,
             memo_t<T> &) {
  return vs[std::size_t(I)];
}
template <class T, std::size_t NV, std::size_t NT, int I>
var<T> eager(tleaf<I>, std::array<var<T>, NV> const &, std::array<var<T>, NT> const &ts,
             memo_t<T> &) {
  return ts[std::size_t(I)];
}
template <class T, std::size_t NV, std::size_t NT>
scalar_of_t<T> eager(sleaf<scalar_of_t<T>> s, std::array<var<T>, NV> const &,
                     std::array<var<T>, NT> const &, memo_t<T> &) {
  return s.value; // (a float beside bfloat16 / half variables)
}
template <class T, std::size_t NV, std::size_t NT, class Op, class A>
var<T> eager(unary<Op, A> const &n, std::array<var<T>, NV> const &vs,
             std::array<var<T>, NT> const &ts, memo_t<T> &memo) {
  if (auto it = memo.find(n.id); it != memo.end())
    return it->second;
#if defined(__CUDACC__)
  var<T> r = dualcast::fused(kernel<Op>{Op{}}, eager(n.a, vs, ts, memo)); // (see one_op)
#else
  var<T> r = one_op<T>(unary<Op, vleaf<0>>{{}, 0}, eager(n.a, vs, ts, memo));
#endif
  memo.emplace(n.id, r);
  return r;
}
template <class T, std::size_t NV, std::size_t NT, class Op, class A, class B>
var<T> eager(binary<Op, A, B> const &n, std::array<var<T>, NV> const &vs,
             std::array<var<T>, NT> const &ts, memo_t<T> &memo) {
  if (auto it = memo.find(n.id); it != memo.end())
    return it->second;
  auto const a = eager(n.a, vs, ts, memo); // (a number where the operand is a scalar leaf)
  auto const b = eager(n.b, vs, ts, memo);
  var<T> r;
#if defined(__CUDACC__)
  r = dualcast::fused(kernel<Op>{Op{}}, a, b); // (see one_op)
#else
  if constexpr (std::is_same_v<A, sleaf<scalar_of_t<T>>>)
    r = one_op<T>(binary<Op, sleaf<scalar_of_t<T>>, vleaf<0>>{n.a, {}, 0}, b);
  else if constexpr (std::is_same_v<B, sleaf<scalar_of_t<T>>>)
    r = one_op<T>(binary<Op, vleaf<0>, sleaf<scalar_of_t<T>>>{{}, n.b, 0}, a);
  else
    r = one_op<T>(binary<Op, vleaf<0>, vleaf<1>>{{}, {}, 0}, a, b);
#endif
  memo.emplace(n.id, r);
  return r;
}

template <class T, std::size_t NV, std::size_t NT, class Op, class A, class B, class C>
var<T> eager(ternary<Op, A, B, C> const &n, std::array<var<T>, NV> const &vs,
             std::array<var<T>, NT> const &ts, memo_t<T> &memo) {
  if (auto it = memo.find(n.id); it != memo.end())
    return it->second;
  var<T> r = dualcast::fused(kernel<Op>{Op{}}, eager(n.a, vs, ts, memo), eager(n.b, vs, ts, memo),
                             eager(n.c, vs, ts, memo));
  memo.emplace(n.id, r);
  return r;
}

template <class T, class E> var<T> eval_eager(E const &e, memo_t<T> &memo) {
  if constexpr (is_var_v<E>) {
    return e;
  } else {
    check_versions(e);
    tape *tp = e.owner();
    std::array<var<T>, std::size_t(E::num_tensors)> ts;
    std::size_t i = 0; // (no index loop: nvcc calls i < 0 a pointless comparison)
    for (auto const &t : e.tensors)
      ts[i++] = tp->constant(t);
    return eager(e.tree, e.vars, ts, memo);
  }
}

} // namespace detail::lz

namespace detail {
template <class T, class A> auto unfused_arg(tape &tp, A const &a) {
  if constexpr (is_tensor_v<A>)
    return tp.constant(a);
  else
    return a;
}
} // namespace detail

// The kernel's lambda evaluated on the variables operation by operation, each operation its own
// node (classic unfused reverse mode). The lambda must be callable on variables: arithmetic and
// dualcast math functions, no value-dependent branches.
template <class F, bool S, class... A> auto unfused(kernel<F, S> const &k, A const &...a) {
  if constexpr ((is_expr_v<A> || ...)) {
    return unfused(k, detail::as_var(a)...);
  } else {
    using T = typename detail::elem_of_args<A...>::type;
    constexpr int K = detail::check_kernel<F, T, detail::kernel_arg_t<T, A>...>();
    tape *tp = detail::tape_of("dualcast::unfused", a...);
    if (!tp)
      throw tape_error("dualcast::unfused: give at least one variable");
    auto r = detail::as_outputs(k.f(detail::unfused_arg<T>(*tp, a)...));
    detail::lz::memo_t<T> memo;
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      std::array<var<T>, std::size_t(K)> v{detail::lz::eval_eager<T>(get<I>(r), memo)...};
      if constexpr (K == 1)
        return v[0];
      else
        return v;
    }
    (std::make_index_sequence<std::size_t(K)>{});
  }
}

// fused(k, ...) or, when the variables' tape has fused == false, unfused(k, ...): the switch
// that runs one lambda both ways in one binary (the lambda must be callable on variables).
template <class F, bool S, class... A> auto call(kernel<F, S> const &k, A const &...a) {
  if constexpr ((is_expr_v<A> || ...)) {
    return call(k, detail::as_var(a)...);
  } else {
    tape *tp = detail::tape_of("dualcast::call", a...);
    if constexpr (detail::any_duals_v<A...>) { // a tape over duals: always the fused node
      if (tp && !tp->fused)
        throw tape_error("dualcast::call: a tape over duals has no unfused mode (tape::fused = "
                         "false): its elementwise nodes are always fused");
      return fused(k, a...);
    } else {
      if (tp && !tp->fused)
        return unfused(k, a...);
      return fused(k, a...);
    }
  }
}
} // namespace dualcast
