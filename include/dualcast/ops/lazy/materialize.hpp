// dualcast/ops/lazy/materialize.hpp: turning lazy expressions into ONE fused node.
//
//   dualcast::var<float> v = e;                    // or e.eval(), dualcast::eval(e)
//   auto [h, c] = dualcast::eval(h_expr, c_expr);  // several outputs: ONE node, one kernel
//
// Materialisation -- .eval(), conversion to var<T>, dualcast::eval(...), or automatically when a
// non-elementwise operation consumes the expression -- records ONE fused node (dualcast::fused)
// with a functor that evaluates the trees on the leaves (on the CPU the leaves as they are: x * x
// passes x twice, and the node keeps one partial array for it; nvcc units deduplicate them, see
// fused_trees); the store / recompute policy comes from the cost model unless given. Repeated
// materialisation of one expr object returns the same variable (cached; copies share the cache);
// an expr embedded in a larger tree is re-evaluated inside the larger kernel instead (recompute,
// no extra memory). On a tape with fused == false the expression is evaluated node by node
// (ops/lazy/unfused.hpp).
#pragma once

#include <dualcast/core/compiled.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/ops/fused.hpp>
#include <dualcast/ops/lazy/expr.hpp>
#include <dualcast/ops/lazy/operators.hpp>
#include <dualcast/ops/lazy/tree.hpp>
#include <dualcast/ops/lazy/unfused.hpp>
#include <dualcast/tape/policy.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

namespace dualcast {

namespace detail::lz {

template <class T> bool same_tensor(tensor<T> const &a, tensor<T> const &b) {
  if (a.data() != b.data() || !(a.dims() == b.dims()))
    return false;
  for (int d = 0; d < a.rank(); ++d)
    if (a.stride(d) != b.stride(d))
      return false;
  return true;
}

template <class T> bool same_var(var<T> const &a, var<T> const &b) {
  if (a.slot() || b.slot())
    return a.slot() == b.slot();
  return same_tensor(a.value(), b.value());
}
// Unique leaves first (padding after them) and the map from leaf to argument (nvcc units only).
template <class L, std::size_t N, class Same>
std::pair<std::array<L, N>, std::array<std::uint8_t, N>> dedup(std::array<L, N> const &in,
                                                               Same same, L const &pad) {
  std::array<L, N> u;
  std::array<std::uint8_t, N> map{};
  if constexpr (N > 0) { // (a loop to N = 0 is a "pointless comparison" error to nvcc)
    std::size_t n = 0;
    for (std::size_t i = 0; i < N; ++i) {
      std::size_t j = 0;
      while (j < n && !same(u[j], in[i]))
        ++j;
      if (j == n)
        u[n++] = in[i];
      map[i] = std::uint8_t(j);
    }
    for (std::size_t i = n; i < N; ++i)
      u[i] = pad;
  } else {
    (void)in, (void)same, (void)pad;
  }
  return {u, map};
}

// A materialisation's variables are checked (graph alive, one tape) by the node it records, in
// the name of dualcast::eval; on tapes over duals and 16-bit types fused() checks them in its own.
template <class T>
inline constexpr bool checked_by_node = !any_duals_v<var<T>> && !any_float16_operand_v<var<T>>;
template <class T, class P, class F, bool S, class... A>
auto materialisation_node(P pol, kernel<F, S> const &k, A const &...a) {
  if constexpr (checked_by_node<T>)
    return detail::fused_node("dualcast::eval", pol, k, a...);
  else
    return dualcast::fused(pol, k, a...);
}

template <class T, class P, std::size_t NV_, std::size_t NT_, class Trees>
auto fused_trees(P pol, tape *tp, std::array<var<T>, NV_> const &vars,
                 std::array<tensor<T>, NT_> const &tens, Trees const &trees) {
  constexpr int NV = int(NV_), NT = int(NT_);
  device leaf_dev = device::host();
  if constexpr (NV > 0)
    leaf_dev = vars[0].value().dev();
  auto const on_stream = detail::tape_stream_scope(tp, leaf_dev); // (CUDA: the tape's stream)
#if !defined(__CUDACC__)
  // On the CPU the leaves are passed as they are, a repeated one twice (the node gives its second
  // use a temporary gradient, and a store node adds its partials into the first use's, so it keeps
  // one partial array per distinct variable: ops/fused/store_node.hpp). So each expression compiles
  // ONE node: deduplicating at run time compiled a second, mapped one (padding, a rank-0 constant
  // that takes the node off the flat path, every argument copied into an array) beside it.
  auto const fn = make_tree_fn<true, NV, NT>(trees, {}, {});
  return [&]<std::size_t... I, std::size_t... J>(std::index_sequence<I...>,
                                                 std::index_sequence<J...>) {
    return materialisation_node<T>(pol, kernel{fn}, vars[I]..., tens[J]...);
  }
  (std::make_index_sequence<std::size_t(NV)>{}, std::make_index_sequence<std::size_t(NT)>{});
#else
  // Padding for the positions freed by deduplication: a rank-0 constant (no memory traffic) on
  // the leaves' device.
  auto pad_t = tensor<T>::zeros(shape{}, leaf_dev);
  // (no structured bindings: clang 14 cannot capture them in the lambdas below)
  auto const dv = dedup(
      vars, [](var<T> const &a, var<T> const &b) { return same_var(a, b); },
      var<T>(pad_t, nullptr, tp));
  auto const dt = dedup(
      tens, [](tensor<T> const &a, tensor<T> const &b) { return same_tensor(a, b); }, pad_t);
  auto const &uv = dv.first;
  auto const &ut = dt.first;
  // nvcc translation units compile only the mapped variant (deduplicated leaves, indexed through
  // the run-time map): each variant is a set of GPU kernels for two architectures, and the
  // compile time of .cu files is what limits us.
  auto const fn = make_tree_fn<false, NV, NT>(trees, dv.second, dt.second);
  return [&]<std::size_t... I, std::size_t... J>(std::index_sequence<I...>,
                                                 std::index_sequence<J...>) {
    return materialisation_node<T>(pol, kernel{fn}, uv[I]..., ut[J]...);
  }
  (std::make_index_sequence<std::size_t(NV)>{}, std::make_index_sequence<std::size_t(NT)>{});
#endif
}

// All exprs (or variables) of es as ONE fused node with one output per expr.
// A variable as a one-leaf expr; an expr by reference.
template <class T, class X> decltype(auto) whole_expr(X const &x) {
  if constexpr (is_var_v<X>)
    return expr<T, vleaf<0>, 1, 0>{vleaf<0>{}, {x}, {}, {x.value().version()}, x.dims(), nullptr};
  else
    return x;
}

template <class T, class P, class... E> auto eval_fused_many(P pol, E const &...es) {
  std::tuple<decltype(whole_expr<T>(es))...> all{whole_expr<T>(es)...};
  constexpr int counts_v[] = {leaf_counts<E>::nv...};
  constexpr int counts_t[] = {leaf_counts<E>::nt...};
  constexpr int NV = (0 + ... + leaf_counts<E>::nv);
  constexpr int NT = (0 + ... + leaf_counts<E>::nt);
  tape *tp = nullptr;
  std::array<var<T>, std::size_t(NV)> vars;
  std::array<tensor<T>, std::size_t(NT)> tens;
  {
    std::size_t iv = 0, it = 0;
    std::apply(
        [&](auto const &...x) {
          auto one = [&](auto const &y) {
            check_versions(y);
            if (tp && y.owner() != tp)
              throw tape_error("dualcast::eval: expressions of different tapes");
            if constexpr (!checked_by_node<T>)
              for (auto const &v : y.vars)
                check_graph_alive("dualcast::eval", v);
            tp = y.owner();
            for (auto const &v : y.vars)
              vars[iv++] = v;
            for (auto const &t : y.tensors)
              tens[it++] = t;
          };
          (one(x), ...);
        },
        all);
  }
  auto trees = [&]<std::size_t... I>(std::index_sequence<I...>) {
    constexpr auto offv = [](std::size_t k) {
      int o = 0;
      for (std::size_t j = 0; j < k; ++j)
        o += counts_v[j];
      return o;
    };
    constexpr auto offt = [](std::size_t k) {
      int o = 0;
      for (std::size_t j = 0; j < k; ++j)
        o += counts_t[j];
      return o;
    };
    return detail::make_tuple(shifted<offv(I), offt(I)>(std::get<I>(all).tree)...);
  }
  (std::index_sequence_for<E...>{});

  return fused_trees<T>(pol, tp, vars, tens, trees);
}
template <class T, class P, class... E> auto eval_fused(P pol, E const &...es) {
  if constexpr (sizeof...(E) == 1 && (is_expr_v<E> && ...)) {
    // One expr: its leaves as they are (copied into arrays of their own, an LSTM gate's were 10
    // variables and their reference counts, per materialisation).
    auto const &e = std::get<0>(std::tie(es...));
    check_versions(e);
    if constexpr (!checked_by_node<T>)
      for (auto const &v : e.vars)
        check_graph_alive("dualcast::eval", v);
    return fused_trees<T>(pol, e.owner(), e.vars, e.tensors, detail::make_tuple(e.tree));
  } else {
    return eval_fused_many<T>(pol, es...);
  }
}

// One expression materialised as its node, behind a function of a stated type, so that the
// compiled component can hold the commonest ones (below): those of one operation on leaves that
// ops/lazy/unfused.hpp lists (x + b, y - target, e * e, sigmoid(x)), under policy::automatic,
// each a store and a recompute node that every program using them compiled again.
template <class T, class P, class Tree, int NV, int NT>
[[gnu::noinline]] var<T> eval_node(P pol, expr<T, Tree, NV, NT> const &e) {
  return eval_fused<T>(pol, e);
}
using tag_auto = std::remove_const_t<decltype(policy::automatic)>;
#define DUALCAST_X0(T, NV, NT, ...) /* (the tree last: it has commas) */                           \
  DUALCAST_INSTANTIATE var<T> eval_node<T, tag_auto, __VA_ARGS__, NV, NT>(                         \
      tag_auto, expr<T, __VA_ARGS__, NV, NT> const &);
#define DUALCAST_X1(T, Op)                                                                         \
  DUALCAST_X0(T, 2, 0, binary<Op, vleaf<0>, vleaf<1>>)                                             \
  DUALCAST_X0(T, 1, 1, binary<Op, vleaf<0>, tleaf<0>>)                                             \
  DUALCAST_X0(T, 1, 1, binary<Op, tleaf<0>, vleaf<0>>)                                             \
  DUALCAST_X0(T, 1, 0, binary<Op, vleaf<0>, sleaf<T>>)                                             \
  DUALCAST_X0(T, 1, 0, binary<Op, sleaf<T>, vleaf<0>>)
#define DUALCAST_X2(T, Op) DUALCAST_X0(T, 1, 0, unary<Op, vleaf<0>>)
#define DUALCAST_X(T)                                                                              \
  DUALCAST_LAZY_COMPILED_BINARY(DUALCAST_X1, T) DUALCAST_LAZY_COMPILED_UNARY(DUALCAST_X2, T)
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X
#undef DUALCAST_X2
#undef DUALCAST_X1
#undef DUALCAST_X0

// Returns false if it does not apply.
template <class T, class P, class E0, class E1>
bool eval_shared(P pol, E0 const &big, E1 const &part, bool part_first,
                 std::array<var<T>, 2> &out) {
  if constexpr (!is_expr_v<E0> || !is_expr_v<E1>) {
    return false;
  } else {
    using M =
        typename match<typename strip<typename E1::tree_type>::type, typename E0::tree_type>::type;
    if constexpr (std::is_void_v<M> || !requires(E1 const &e) { e.tree.id; }) {
      return false;
    } else {
      M const *sub = find_subtree<M>(big.tree, part.tree.id);
      if (!sub)
        return false;
      check_versions(big);
      check_versions(part);
      if (part_first)
        out = fused_trees<T>(pol, big.owner(), big.vars, big.tensors,
                             detail::make_tuple(*sub, big.tree));
      else
        out = fused_trees<T>(pol, big.owner(), big.vars, big.tensors,
                             detail::make_tuple(big.tree, *sub));
      return true;
    }
  }
}

} // namespace detail::lz

template <class T, class Tree, int NV, int NT>
template <class P>
var<T> expr<T, Tree, NV, NT>::eval(P pol) const {
  static_assert(is_policy_v<P>,
                "dualcast::expr::eval: the argument is a policy (dualcast::policy::store, ...)");
  if (var<T> const *c = cache_.get())
    return *c;
  var<T> r = materialise(pol);
  cache_.set(r);
  return r;
}

template <class T, class Tree, int NV, int NT>
template <class P>
var<T> expr<T, Tree, NV, NT>::materialise(P pol) const {
  tape *tp = owner();
  var<T> r;
  if constexpr (is_dual_v<T>) { // a tape over duals: always the fused node
                                // (ops/fused/dual_node.hpp)
    if (tp && !tp->fused)
      throw tape_error(
          "dualcast::eval: a tape over duals has no unfused mode (tape::fused = false): "
          "its elementwise nodes are always fused");
    r = detail::lz::eval_fused<T>(pol, *this);
  } else if (tp && !tp->fused) {
    detail::lz::memo_t<T> memo;
    r = detail::lz::eval_eager<T>(*this, memo);
  } else {
    r = detail::lz::eval_node<T>(pol, *this);
  }
  return r;
}

// Materialises several exprs (or variables) of one tape as ONE fused node with one output each
// (an LSTM cell's h and c); node by node on a tape with fused == false. With two outputs of
// which one is a subexpression of the other (c2 inside h2 = sigmoid(o) * tanh(c2)), the node's
// inputs are the larger one's leaves only (no duplicated leaves). Each output has its own
// expression's shape: expressions of different shapes are materialised one by one (a fused
// kernel runs over one iteration shape).
template <class P, class E0, class... E>
requires(is_policy_v<P> &&detail::lz::lazy_operand<E0> &&
         (detail::lz::lazy_operand<E> && ...)) auto eval(P pol, E0 const &e0, E const &...es) {
  using T = detail::lz::elem_t<E0>;
  tape *tp = e0.owner();
  if (tp && !tp->fused) {
    detail::lz::memo_t<T> memo;
    std::array<var<T>, 1 + sizeof...(E)> r{detail::lz::eval_eager<T>(e0, memo),
                                           detail::lz::eval_eager<T>(es, memo)...};
    return r;
  }
  if constexpr (sizeof...(E) > 0) {
    if (!((es.dims() == e0.dims()) && ...)) {
      auto one = [&](auto const &e) -> var<T> {
        if constexpr (is_expr_v<decltype(e)>)
          return e.eval(pol);
        else
          return e;
      };
      return std::array<var<T>, 1 + sizeof...(E)>{one(e0), one(es)...};
    }
  }
  if constexpr (sizeof...(E) == 1) {
    std::array<var<T>, 2> shared;
    auto const &e1 = std::get<0>(std::tie(es...));
    if (detail::lz::eval_shared<T>(pol, e0, e1, false, shared) ||
        detail::lz::eval_shared<T>(pol, e1, e0, true, shared))
      return shared;
  }
  auto r = detail::lz::eval_fused<T>(pol, e0, es...);
  if constexpr (sizeof...(E) == 0)
    return std::array<var<T>, 1>{r};
  else
    return r;
}
template <class E0, class... E>
requires(detail::lz::lazy_operand<E0> &&
         (detail::lz::lazy_operand<E> && ...)) auto eval(E0 const &e0, E const &...es) {
  return eval(policy::automatic, e0, es...);
}

} // namespace dualcast
