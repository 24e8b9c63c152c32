// dualcast/ops/expression.hpp: lazy elementwise expressions on tape variables.
//
//   auto e = dualcast::sigmoid(x) * y + z;   // nothing is computed or recorded yet
//   auto e2 = dualcast::tanh(e) * 2.0;       // still lazy: separate calls fuse
//   auto m = dualcast::matmul(e2, W);        // e2 becomes ONE fused node (one kernel), then matmul
//   dualcast::var<float> v = e2;             // or on request: e2.eval(), dualcast::eval(e2)
//   auto [h, c] = dualcast::eval(h_expr, c_expr);   // several outputs: ONE node, one kernel
//
// Every elementwise operator (+ - * / unary -, pow) and math function (exp, log, tanh, sigmoid,
// ... the list at the end of this file) returns a dualcast::expr when an argument is a tape
// variable or already an expr. An expr holds a tree (a trivially copyable value: the operations
// as types, the scalar leaves as values, never a reference) and its array leaves by value: the
// variables (shared handles) and the constant tensors. Materialisation -- .eval(), conversion
// to var<T>, dualcast::eval(...), or automatically when a non-elementwise operation consumes it
// (matmul, sum / mean / max / min, softmax family, shape operations, indexing, fused(),
// tape::backward) -- deduplicates the leaves (x * x has ONE input: the same variable, or the same
// view of the same tensor) and records ONE fused node through dualcast::fused with a functor that
// evaluates the tree on the leaves; the store / recompute policy comes from the cost model
// unless given. Repeated materialisation of one expr object returns the same variable (cached;
// copies share the cache); an expr embedded in a larger tree is re-evaluated inside the larger
// kernel instead (recompute, no extra memory).
//
// Unfused mode: on a tape with tape::fused == false the same expr is materialised node by node,
// each operation its own node (classic reverse mode; a subexpression used twice is evaluated
// once), which is what dualcast::unfused(k, ...) and dualcast::call(k, ...) use.
//
// Leaves are captured with their storage version; materialising after one of them was modified
// in place throws dualcast::version_error (the expr would otherwise see the new values).
#pragma once

#include <dualcast/errors.hpp>
#include <dualcast/kernel.hpp>
#include <dualcast/math.hpp>
#include <dualcast/ops/elementwise.hpp>
#include <dualcast/tape.hpp>
#include <dualcast/tensor.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dualcast {

namespace detail::lz {

// ---- the tree: trivially copyable nodes evaluated on a context of leaf values ------------------
inline std::uint64_t next_id() {
  static std::atomic<std::uint64_t> n{0};
  return ++n;
}

// Leaves return references to the kernel's arguments (no copies of wide duals).
template <int I> struct vleaf { // a variable
  template <class C> DUALCAST_HD DUALCAST_FORCEINLINE decltype(auto) eval(C const &c) const {
    if constexpr (C::direct)
      return *get<std::size_t(I)>(c.p); // the argument itself, at a compile-time position
    else
      return (c.v[c.vmap[I]]);
  }
};
template <int I> struct tleaf { // a constant tensor
  template <class C> DUALCAST_HD DUALCAST_FORCEINLINE decltype(auto) eval(C const &c) const {
    if constexpr (C::direct)
      return *get<std::size_t(C::nv + I)>(c.p);
    else
      return (c.t[c.tmap[I]]);
  }
};
template <class T> struct sleaf { // a scalar, held by value
  T value;
  template <class C> DUALCAST_HD DUALCAST_FORCEINLINE T eval(C const &) const { return value; }
};
template <class Op, class A> struct unary {
  A a;
  std::uint64_t id; // identifies the subexpression (unfused mode evaluates it once)
  template <class C> DUALCAST_HD DUALCAST_FORCEINLINE auto eval(C const &c) const {
    return Op{}(a.eval(c));
  }
};
template <class Op, class A, class B> struct binary {
  A a;
  B b;
  std::uint64_t id;
  template <class C> DUALCAST_HD auto eval(C const &c) const { return Op{}(a.eval(c), b.eval(c)); }
};

// The leaf indices of a tree moved by (DV, DT): the right operand when two exprs are joined.
template <int DV, int DT, int I> constexpr vleaf<I + DV> shifted(vleaf<I>) { return {}; }
template <int DV, int DT, int I> constexpr tleaf<I + DT> shifted(tleaf<I>) { return {}; }
template <int DV, int DT, class T> constexpr sleaf<T> shifted(sleaf<T> s) { return s; }
template <int DV, int DT, class Op, class A> constexpr auto shifted(unary<Op, A> const &n) {
  using SA = decltype(shifted<DV, DT>(n.a));
  return unary<Op, SA>{shifted<DV, DT>(n.a), n.id};
}
template <int DV, int DT, class Op, class A, class B>
constexpr auto shifted(binary<Op, A, B> const &n) {
  using SA = decltype(shifted<DV, DT>(n.a));
  using SB = decltype(shifted<DV, DT>(n.b));
  return binary<Op, SA, SB>{shifted<DV, DT>(n.a), shifted<DV, DT>(n.b), n.id};
}

// What a tree reads inside the kernel: the deduplicated variable and tensor arguments and the
// map from leaf index to argument.
// Without duplicates: pointers to the arguments, each of its own type.
template <int NV, class... X> struct direct_context {
  static constexpr bool direct = true;
  static constexpr int nv = NV;
  detail::tuple<X const *...> p;
};
// With duplicates: copies in arrays of one type, indexed through the maps.
template <class V, class C, int NV, int NT, bool Direct> struct context {
  static constexpr bool direct = Direct;
  V const *v;
  C const *t;
  std::uint8_t const *vmap;
  std::uint8_t const *tmap;
};

template <class V, class... C> struct tensor_type { using type = std::common_type_t<C...>; };
template <class V> struct tensor_type<V> { using type = V; };

// The kernel functor of a materialisation: arguments are NV variables then NT tensors (after
// deduplication; unused positions are padding); the trees give the outputs.
template <bool Direct, int NV, int NT, class... Trees> struct tree_fn {
  detail::tuple<Trees...> trees;
  std::array<std::uint8_t, NV> vmap;
  std::array<std::uint8_t, NT> tmap;
  template <class... X> DUALCAST_HD DUALCAST_FORCEINLINE auto operator()(X const &...x) const {
    static_assert(sizeof...(X) == std::size_t(NV + NT));
    if constexpr (Direct) {
      direct_context<NV, X...> c{detail::make_tuple(&x...)};
      return eval_all(c, std::index_sequence_for<Trees...>{});
    } else
      return [&]<std::size_t... I, std::size_t... J>(std::index_sequence<I...>,
                                                     std::index_sequence<J...>) {
        // Under chunked VJPs some variables are duals and others plain: one common type.
        using V = std::common_type_t<std::decay_t<decltype(nth<I>(x...))>...>;
        using C =
            typename tensor_type<V,
                                 std::decay_t<decltype(nth<std::size_t(NV) + J>(x...))>...>::type;
        V const vs[NV] = {V(nth<I>(x...))...};
        C const ts[NT > 0 ? NT : 1] = {C(nth<std::size_t(NV) + J>(x...))...};
        context<V, C, NV, NT, false> c{vs, ts, vmap.data(), tmap.data()};
        return eval_all(c, std::index_sequence_for<Trees...>{});
      }
    (std::make_index_sequence<std::size_t(NV)>{}, std::make_index_sequence<std::size_t(NT)>{});
  }
  template <class Cx, std::size_t... K>
  DUALCAST_HD DUALCAST_FORCEINLINE auto eval_all(Cx const &c, std::index_sequence<K...>) const {
    if constexpr (sizeof...(K) == 1)
      return get<0>(trees).eval(c);
    else
      return outputs(get<K>(trees).eval(c)...);
  }
};

} // namespace detail::lz

inline namespace DUALCAST_TAPE_ABI { // see detail/device_dispatch.hpp
template <class T, class Tree, int NV, int NT> class expr;
}

template <class E> struct is_expr : std::false_type {};
template <class T, class Tree, int NV, int NT>
struct is_expr<expr<T, Tree, NV, NT>> : std::true_type {};
template <class E> inline constexpr bool is_expr_v = is_expr<std::remove_cvref_t<E>>::value;

// A lazy elementwise expression over variables (NV leaves), constant tensors (NT leaves) and
// scalars (in the tree). See the file comment.
inline namespace DUALCAST_TAPE_ABI {
template <class T, class Tree, int NV, int NT> class expr {
  static_assert(std::is_trivially_copyable_v<Tree>, "dualcast::expr: the tree must be trivially "
                                                    "copyable (values only, no references)");
  static_assert(NV >= 1, "dualcast::expr: an expression has at least one variable");

public:
  static constexpr bool is_dualcast_expr = true;
  using value_type = T;
  using tree_type = Tree;
  static constexpr int num_vars = NV, num_tensors = NT;

  Tree tree;
  std::array<var<T>, NV> vars;
  std::array<tensor<T>, NT> tensors;
  std::array<std::uint64_t, std::size_t(NV + NT)> versions{};
  shape dims_{};

  shape const &dims() const { return dims_; }
  int rank() const { return dims_.rank; }
  index_t size() const { return dims_.size(); }
  tape *owner() const { return vars[0].owner(); }
  bool requires_grad() const {
    for (auto const &v : vars)
      if (v.requires_grad())
        return true;
    return false;
  }
  // Materialises: ONE fused node (or node by node on a tape with fused == false).
  var<T> eval(policy pol = policy::automatic) const;
  operator var<T>() const { return eval(); } // NOLINT(google-explicit-constructor)
  tensor<T> value() const { return eval().value(); }
  T item() const { return eval().item(); }

  // Internal: the materialised variable, shared by copies of this expr.
  std::shared_ptr<var<T>> cache_ = std::make_shared<var<T>>();
};
} // namespace DUALCAST_TAPE_ABI

namespace detail::lz {

template <class A> struct elem { using type = void; };
template <class T> struct elem<var<T>> { using type = T; };
template <class T> struct elem<tensor<T>> { using type = T; };
template <class T, class Tr, int NV, int NT> struct elem<expr<T, Tr, NV, NT>> { using type = T; };
template <class A> using elem_t = typename elem<std::remove_cvref_t<A>>::type;

template <class A>
concept lazy_operand = is_var_v<A> || is_expr_v<A>;
template <class A>
concept leaf_operand = lazy_operand<A> || is_tensor_v<A> || std::is_arithmetic_v<A>;

template <class A, class B> struct pair_elem {
  using type = std::conditional_t<std::is_void_v<elem_t<A>>, elem_t<B>, elem_t<A>>;
};

// Any operand as an expr of element type T.
template <class T, class A> auto as_expr(A const &a) {
  if constexpr (is_expr_v<A>) {
    static_assert(std::is_same_v<typename A::value_type, T>,
                  "dualcast: elementwise operands must have one element type");
    return a;
  } else if constexpr (is_var_v<A>) {
    static_assert(std::is_same_v<elem_t<A>, T>,
                  "dualcast: elementwise operands must have one element type");
    expr<T, vleaf<0>, 1, 0> e{vleaf<0>{}, {a}, {}, {a.value().version()}, a.dims()};
    return e;
  } else if constexpr (is_tensor_v<A>) {
    static_assert(std::is_same_v<elem_t<A>, T>,
                  "dualcast: elementwise operands must have one element type");
    return a;
  } else {
    return sleaf<T>{T(a)};
  }
}

template <class X> struct leaf_counts { static constexpr int nv = 0, nt = 0; };
template <class T, class Tr, int NV, int NT> struct leaf_counts<expr<T, Tr, NV, NT>> {
  static constexpr int nv = NV, nt = NT;
};
template <class T> struct leaf_counts<tensor<T>> { static constexpr int nv = 0, nt = 1; };

template <class X> auto tree_of(X const &x) {
  if constexpr (is_expr_v<X>)
    return x.tree;
  else if constexpr (is_tensor_v<X>)
    return tleaf<0>{};
  else
    return x; // sleaf
}

template <class T, std::size_t N, std::size_t M>
std::array<T, N + M> concat(std::array<T, N> const &a, std::array<T, M> const &b) {
  std::array<T, N + M> r;
  for (std::size_t i = 0; i < N; ++i)
    r[i] = a[i];
  for (std::size_t i = 0; i < M; ++i)
    r[N + i] = b[i];
  return r;
}

template <class T, class X> std::array<var<T>, leaf_counts<X>::nv> vars_of(X const &x) {
  if constexpr (is_expr_v<X>)
    return x.vars;
  else
    return {};
}
template <class T, class X> std::array<tensor<T>, leaf_counts<X>::nt> tensors_of(X const &x) {
  if constexpr (is_expr_v<X>)
    return x.tensors;
  else if constexpr (is_tensor_v<X>)
    return {x};
  else
    return {};
}
template <class T, class X> auto versions_of(X const &x) {
  constexpr int nv = leaf_counts<X>::nv, nt = leaf_counts<X>::nt;
  std::array<std::uint64_t, std::size_t(nv)> v{};
  std::array<std::uint64_t, std::size_t(nt)> t{};
  if constexpr (is_expr_v<X>) {
    for (int i = 0; i < nv; ++i)
      v[std::size_t(i)] = x.versions[std::size_t(i)];
    for (int i = 0; i < nt; ++i)
      t[std::size_t(i)] = x.versions[std::size_t(nv + i)];
  } else if constexpr (is_tensor_v<X>) {
    t[0] = x.version();
  }
  return std::pair{v, t};
}
template <class X> shape dims_of(X const &x) {
  if constexpr (is_expr_v<X> || is_tensor_v<X>)
    return x.dims();
  else
    return shape{};
}

// Joins operands (exprs, tensors, scalar leaves) under one operation node.
template <class T, class Op, class... X> auto join(char const *op, X const &...x) {
  constexpr int counts_v[] = {leaf_counts<X>::nv...};
  constexpr int counts_t[] = {leaf_counts<X>::nt...};
  constexpr int NV = (0 + ... + leaf_counts<X>::nv), NT = (0 + ... + leaf_counts<X>::nt);
  // Shape and tape checks now, so that errors point at the operation that caused them.
  tape *tp = nullptr;
  shape s{};
  bool first = true;
  auto check = [&](auto const &y) {
    using Y = std::remove_cvref_t<decltype(y)>;
    if constexpr (is_expr_v<Y>) {
      if (tp && y.owner() != tp)
        throw tape_error(std::string(op) + ": operands are variables of different tapes");
      tp = y.owner();
    }
    bool ok = true;
    shape d = dims_of(y);
    shape b = broadcast_pair(s, d, ok);
    if (!ok)
      throw shape_error(std::string(op) + ": shapes " + to_string(s) + " and " + to_string(d) +
                        " do not broadcast");
    s = first ? d : b;
    first = false;
  };
  (check(x), ...);

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
    return detail::make_tuple(shifted<offv(I), offt(I)>(tree_of(x))...);
  }
  (std::index_sequence_for<X...>{});
  auto node = [&]<std::size_t... I>(std::index_sequence<I...>) {
    if constexpr (sizeof...(X) == 1)
      return unary<Op, std::decay_t<decltype(get<0>(trees))>>{get<0>(trees), next_id()};
    else
      return binary<Op, std::decay_t<decltype(get<0>(trees))>,
                    std::decay_t<decltype(get<1>(trees))>>{get<0>(trees), get<1>(trees), next_id()};
  }
  (std::index_sequence_for<X...>{});

  expr<T, decltype(node), NV, NT> e{node, {}, {}, {}, s};
  std::size_t iv = 0, it = 0;
  std::array<std::uint64_t, std::size_t(NT) + 1> tver{};
  auto add = [&](auto const &y) {
    auto vs = vars_of<T>(y);
    auto ts = tensors_of<T>(y);
    auto [vv, tv] = versions_of<T>(y);
    // (index loops over std::array<_, 0> are "pointless comparisons" to nvcc: count instead)
    std::size_t i = 0;
    for (auto const &v : vs)
      e.vars[iv] = v, e.versions[iv] = vv[i++], ++iv;
    i = 0;
    for (auto const &t : ts)
      e.tensors[it] = t, tver[it] = tv[i++], ++it;
  };
  (add(x), ...);
  for (int i = 0; i < NT; ++i)
    e.versions[std::size_t(NV + i)] = tver[std::size_t(i)];
  return e;
}

template <class Op, class A> auto make_unary(char const *op, A const &a) {
  using T = elem_t<A>;
  return join<T, Op>(op, as_expr<T>(a));
}
template <class Op, class A, class B> auto make_binary(char const *op, A const &a, B const &b) {
  using T = typename pair_elem<A, B>::type;
  return join<T, Op>(op, as_expr<T>(a), as_expr<T>(b));
}

// ---- materialisation ------------------------------------------------------------------------
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
// Unique leaves first (padding after them) and the map from leaf to argument.
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

template <class E> void check_versions(E const &e) {
  constexpr int NV = E::num_vars, NT = E::num_tensors;
  for (int i = 0; i < NV + NT; ++i) {
    std::uint64_t now = i < NV ? e.vars[std::size_t(i)].value().version()
                               : e.tensors[std::size_t(i - NV)].version();
    if (now != e.versions[std::size_t(i)])
      throw version_error(
          "dualcast::expr: " + std::string(i < NV ? "variable leaf " : "tensor leaf ") +
          std::to_string(i < NV ? i : i - NV) +
          " was modified in place after the lazy expression was built (version " +
          std::to_string(e.versions[std::size_t(i)]) + ", now " + std::to_string(now) + ")");
  }
}

// Node-by-node evaluation (unfused mode); memo keeps subexpressions used twice evaluated once.
template <class T> using memo_t = std::unordered_map<std::uint64_t, var<T>>;

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
T eager(sleaf<T> s, std::array<var<T>, NV> const &, std::array<var<T>, NT> const &, memo_t<T> &) {
  return s.value;
}
template <class T, std::size_t NV, std::size_t NT, class Op, class A>
var<T> eager(unary<Op, A> const &n, std::array<var<T>, NV> const &vs,
             std::array<var<T>, NT> const &ts, memo_t<T> &memo) {
  if (auto it = memo.find(n.id); it != memo.end())
    return it->second;
  var<T> r = dualcast::fused(kernel<Op>{Op{}}, eager(n.a, vs, ts, memo));
  memo.emplace(n.id, r);
  return r;
}
template <class T, std::size_t NV, std::size_t NT, class Op, class A, class B>
var<T> eager(binary<Op, A, B> const &n, std::array<var<T>, NV> const &vs,
             std::array<var<T>, NT> const &ts, memo_t<T> &memo) {
  if (auto it = memo.find(n.id); it != memo.end())
    return it->second;
  var<T> r = dualcast::fused(kernel<Op>{Op{}}, eager(n.a, vs, ts, memo), eager(n.b, vs, ts, memo));
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

// ONE fused node evaluating `trees` (one output each) on the leaves (deduplicated here).
template <class T, std::size_t NV_, std::size_t NT_, class Trees>
auto fused_trees(policy pol, tape *tp, std::array<var<T>, NV_> const &vars,
                 std::array<tensor<T>, NT_> const &tens, Trees const &trees) {
  constexpr int NV = int(NV_), NT = int(NT_);
  // Padding for the positions freed by deduplication: a rank-0 constant (no memory traffic) on
  // the leaves' device.
  device leaf_dev = device::host();
  if constexpr (NV > 0)
    leaf_dev = vars[0].value().dev();
  auto pad_t = tensor<T>::zeros(shape{}, leaf_dev);
  // (no structured bindings: clang 14 cannot capture them in the lambdas below)
  auto const dv = dedup(
      vars, [](var<T> const &a, var<T> const &b) { return same_var(a, b); },
      var<T>(pad_t, nullptr, tp));
  auto const dt = dedup(
      tens, [](tensor<T> const &a, tensor<T> const &b) { return same_tensor(a, b); }, pad_t);
  auto const &uv = dv.first;
  auto const &ut = dt.first;
  // Without duplicates (the common case) the leaves index the arguments at compile time; with
  // them, through the run-time map (a second instantiation).
  bool identity = true;
  for (int i = 0; i < NV; ++i)
    identity = identity && dv.second[std::size_t(i)] == i;
  for (int i = 0; i < NT; ++i)
    identity = identity && dt.second[std::size_t(i)] == i;
  auto run = [&]<bool Direct>(std::bool_constant<Direct>) {
    auto fn = [&]<class... Tr>(detail::tuple<Tr...> const &t) {
      return tree_fn<Direct, NV, NT, Tr...>{t, dv.second, dt.second};
    }(trees);
    return [&]<std::size_t... I, std::size_t... J>(std::index_sequence<I...>,
                                                   std::index_sequence<J...>) {
      return dualcast::fused(pol, kernel{fn}, uv[I]..., ut[J]...);
    }
    (std::make_index_sequence<std::size_t(NV)>{}, std::make_index_sequence<std::size_t(NT)>{});
  };
#if defined(__CUDACC__)
  // nvcc translation units compile only the mapped variant: each variant is a set of GPU kernels
  // for two architectures, and the compile time of .cu files is what limits us.
  (void)identity;
#else
  if (identity)
    return run(std::true_type{});
#endif
  return run(std::false_type{});
}

// All exprs (or variables) of es as ONE fused node with one output per expr.
template <class T, class... E> auto eval_fused(policy pol, E const &...es) {
  auto all = std::make_tuple(as_expr<T>(es)...);
  constexpr int counts_v[] = {leaf_counts<decltype(as_expr<T>(es))>::nv...};
  constexpr int counts_t[] = {leaf_counts<decltype(as_expr<T>(es))>::nt...};
  constexpr int NV = (0 + ... + leaf_counts<decltype(as_expr<T>(es))>::nv);
  constexpr int NT = (0 + ... + leaf_counts<decltype(as_expr<T>(es))>::nt);
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

// ---- sharing: an output that is a subexpression of another output (an LSTM cell's c2 inside
// h2) reuses that output's leaves instead of adding its own duplicates -------------------------
template <class N> struct strip { using type = N; };
template <int I> struct strip<vleaf<I>> { using type = vleaf<0>; };
template <int I> struct strip<tleaf<I>> { using type = tleaf<0>; };
template <class Op, class A> struct strip<unary<Op, A>> {
  using type = unary<Op, typename strip<A>::type>;
};
template <class Op, class A, class B> struct strip<binary<Op, A, B>> {
  using type = binary<Op, typename strip<A>::type, typename strip<B>::type>;
};

// The first subtree type of N equal to S up to leaf indices (void if none).
template <class S, class N> struct match {
  using type = std::conditional_t<std::is_same_v<typename strip<N>::type, S>, N, void>;
};
template <class S, class Op, class A> struct match<S, unary<Op, A>> {
  using type = std::conditional_t<std::is_same_v<typename strip<unary<Op, A>>::type, S>,
                                  unary<Op, A>, typename match<S, A>::type>;
};
template <class S, class Op, class A, class B> struct match<S, binary<Op, A, B>> {
  using sub = std::conditional_t<std::is_void_v<typename match<S, A>::type>,
                                 typename match<S, B>::type, typename match<S, A>::type>;
  using type = std::conditional_t<std::is_same_v<typename strip<binary<Op, A, B>>::type, S>,
                                  binary<Op, A, B>, sub>;
};

// The subtree of n of type M with the given id, or nullptr.
template <class M, class N> M const *find_subtree(N const &n, std::uint64_t id) {
  if constexpr (std::is_same_v<N, M>)
    if (n.id == id)
      return &n;
  if constexpr (requires { n.b; }) {
    if (auto p = find_subtree<M>(n.a, id))
      return p;
    return find_subtree<M>(n.b, id);
  } else if constexpr (requires { n.a; }) {
    return find_subtree<M>(n.a, id);
  } else {
    (void)id;
    return static_cast<M const *>(nullptr);
  }
}

// eval(big, part) where part's tree occurs in big's (same id): ONE node on big's leaves only.
// Returns false if it does not apply.
template <class T, class E0, class E1>
bool eval_shared(policy pol, E0 const &big, E1 const &part, bool part_first,
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
var<T> expr<T, Tree, NV, NT>::eval(policy pol) const {
  if (cache_->owner())
    return *cache_;
  tape *tp = owner();
  var<T> r;
  if (tp && !tp->fused) {
    detail::lz::memo_t<T> memo;
    r = detail::lz::eval_eager<T>(*this, memo);
  } else {
    r = detail::lz::eval_fused<T>(pol, *this);
  }
  *cache_ = r;
  return r;
}

// Materialises several exprs (or variables) of one tape as ONE fused node with one output each
// (an LSTM cell's h and c); node by node on a tape with fused == false. With two outputs of
// which one is a subexpression of the other (c2 inside h2 = sigmoid(o) * tanh(c2)), the node's
// inputs are the larger one's leaves only (no duplicated leaves).
template <class E0, class... E>
requires(detail::lz::lazy_operand<E0> &&
         (detail::lz::lazy_operand<E> && ...)) auto eval(policy pol, E0 const &e0, E const &...es) {
  using T = detail::lz::elem_t<E0>;
  tape *tp = e0.owner();
  if (tp && !tp->fused) {
    detail::lz::memo_t<T> memo;
    std::array<var<T>, 1 + sizeof...(E)> r{detail::lz::eval_eager<T>(e0, memo),
                                           detail::lz::eval_eager<T>(es, memo)...};
    return r;
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

// ---- unfused mode and the switch (moved here: they materialise the lambda's exprs) ----------

// The kernel's lambda evaluated on the variables operation by operation, each operation its own
// node (classic unfused reverse mode). The lambda must be callable on variables: arithmetic and
// dualcast math functions, no value-dependent branches.
template <class F, bool S, class... A> auto unfused(kernel<F, S> const &k, A const &...a) {
  if constexpr ((is_expr_v<A> || ...)) {
    return unfused(k, detail::materialize(a)...);
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
    return call(k, detail::materialize(a)...);
  } else {
    tape *tp = detail::tape_of("dualcast::call", a...);
    if (tp && !tp->fused)
      return unfused(k, a...);
    return fused(k, a...);
  }
}

// ---- operators and math functions: lazy ------------------------------------------------------
namespace detail::lz {
template <class A, class B>
concept lazy_pair = (lazy_operand<A> || lazy_operand<B>)&&leaf_operand<A> &&leaf_operand<B>;

struct op_add {
  template <class X, class Y> DUALCAST_HD auto operator()(X const &x, Y const &y) const {
    return x + y;
  }
};
struct op_sub {
  template <class X, class Y> DUALCAST_HD auto operator()(X const &x, Y const &y) const {
    return x - y;
  }
};
struct op_mul {
  template <class X, class Y> DUALCAST_HD auto operator()(X const &x, Y const &y) const {
    return x * y;
  }
};
struct op_div {
  template <class X, class Y> DUALCAST_HD auto operator()(X const &x, Y const &y) const {
    return x / y;
  }
};
struct op_pow { // a scalar with a SIMD batch: the scalar as a batch
  template <class X, class Y> DUALCAST_HD auto operator()(X const &x, Y const &y) const {
    if constexpr (std::is_arithmetic_v<X> && !std::is_arithmetic_v<Y> && !is_dual_v<Y>)
      return dualcast::pow(Y(x), y);
    else if constexpr (std::is_arithmetic_v<Y> && !std::is_arithmetic_v<X> && !is_dual_v<X>)
      return dualcast::pow(x, X(y));
    else
      return dualcast::pow(x, y);
  }
};
struct op_neg {
  template <class X> DUALCAST_HD auto operator()(X const &x) const { return -x; }
};
} // namespace detail::lz

template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto operator+(A const &a, B const &b) {
  return detail::lz::make_binary<detail::lz::op_add>("dualcast::operator+", a, b);
}
template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto operator-(A const &a, B const &b) {
  return detail::lz::make_binary<detail::lz::op_sub>("dualcast::operator-", a, b);
}
template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto operator*(A const &a, B const &b) {
  return detail::lz::make_binary<detail::lz::op_mul>("dualcast::operator*", a, b);
}
template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto operator/(A const &a, B const &b) {
  return detail::lz::make_binary<detail::lz::op_div>("dualcast::operator/", a, b);
}
template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto pow(A const &a, B const &b) {
  return detail::lz::make_binary<detail::lz::op_pow>("dualcast::pow", a, b);
}
template <class A>
requires detail::lz::lazy_operand<A>
auto operator-(A const &a) { return detail::lz::make_unary<detail::lz::op_neg>("operator-", a); }

#define DUALCAST_DETAIL_LAZY_UNARY(fn)                                                             \
  namespace detail::lz {                                                                           \
  struct op_##fn {                                                                                 \
    template <class X> DUALCAST_HD auto operator()(X const &x) const { return dualcast::fn(x); }   \
  };                                                                                               \
  }                                                                                                \
  namespace detail {                                                                               \
  inline constexpr auto k_##fn = kernel(lz::op_##fn{});                                            \
  }                                                                                                \
  template <class A>                                                                               \
  requires detail::lz::lazy_operand<A>                                                             \
  auto fn(A const &a) { return detail::lz::make_unary<detail::lz::op_##fn>("dualcast::" #fn, a); }
DUALCAST_DETAIL_LAZY_UNARY(exp)
DUALCAST_DETAIL_LAZY_UNARY(expm1)
DUALCAST_DETAIL_LAZY_UNARY(exp2)
DUALCAST_DETAIL_LAZY_UNARY(log)
DUALCAST_DETAIL_LAZY_UNARY(log1p)
DUALCAST_DETAIL_LAZY_UNARY(log2)
DUALCAST_DETAIL_LAZY_UNARY(log10)
DUALCAST_DETAIL_LAZY_UNARY(sqrt)
DUALCAST_DETAIL_LAZY_UNARY(cbrt)
DUALCAST_DETAIL_LAZY_UNARY(sin)
DUALCAST_DETAIL_LAZY_UNARY(cos)
DUALCAST_DETAIL_LAZY_UNARY(tan)
DUALCAST_DETAIL_LAZY_UNARY(asin)
DUALCAST_DETAIL_LAZY_UNARY(acos)
DUALCAST_DETAIL_LAZY_UNARY(atan)
DUALCAST_DETAIL_LAZY_UNARY(sinh)
DUALCAST_DETAIL_LAZY_UNARY(cosh)
DUALCAST_DETAIL_LAZY_UNARY(tanh)
DUALCAST_DETAIL_LAZY_UNARY(asinh)
DUALCAST_DETAIL_LAZY_UNARY(acosh)
DUALCAST_DETAIL_LAZY_UNARY(atanh)
DUALCAST_DETAIL_LAZY_UNARY(erf)
DUALCAST_DETAIL_LAZY_UNARY(erfc)
DUALCAST_DETAIL_LAZY_UNARY(abs)
DUALCAST_DETAIL_LAZY_UNARY(relu)
DUALCAST_DETAIL_LAZY_UNARY(sigmoid)
DUALCAST_DETAIL_LAZY_UNARY(softplus)
#undef DUALCAST_DETAIL_LAZY_UNARY

// ---- non-elementwise operations materialise their expr operands -----------------------------
template <class E>
requires is_expr_v<E>
auto sum(E const &e, std::vector<int> const &axes = {}, bool keepdims = false) {
  return sum(e.eval(), axes, keepdims);
}
template <class E>
requires is_expr_v<E>
auto mean(E const &e, std::vector<int> const &axes = {}, bool keepdims = false) {
  return mean(e.eval(), axes, keepdims);
}
template <class E>
requires is_expr_v<E>
auto max(E const &e, std::vector<int> const &axes = {}, bool keepdims = false) {
  return max(e.eval(), axes, keepdims);
}
template <class E>
requires is_expr_v<E>
auto min(E const &e, std::vector<int> const &axes = {}, bool keepdims = false) {
  return min(e.eval(), axes, keepdims);
}
template <class E>
requires is_expr_v<E>
auto transpose(E const &e, int a = 0, int b = 1) { return transpose(e.eval(), a, b); }
template <class E>
requires is_expr_v<E>
auto permute(E const &e, std::vector<int> const &perm) { return permute(e.eval(), perm); }
template <class E>
requires is_expr_v<E>
auto reshape(E const &e, shape const &s) { return reshape(e.eval(), s); }
template <class E>
requires is_expr_v<E>
auto slice(E const &e, int d, index_t begin, index_t end, index_t step = 1) {
  return slice(e.eval(), d, begin, end, step);
}
template <class E>
requires is_expr_v<E>
auto broadcast_to(E const &e, shape const &s) { return broadcast_to(e.eval(), s); }
template <class E>
requires is_expr_v<E>
auto softmax(E const &e, int axis = -1) { return softmax(e.eval(), axis); }
template <class E>
requires is_expr_v<E>
auto log_softmax(E const &e, int axis = -1) { return log_softmax(e.eval(), axis); }
template <class E>
requires is_expr_v<E>
auto logsumexp(E const &e, int axis = -1, bool keepdims = false) {
  return logsumexp(e.eval(), axis, keepdims);
}
template <class E>
requires is_expr_v<E>
auto index_select(E const &e, int axis, std::vector<index_t> const &indices) {
  return index_select(e.eval(), axis, indices);
}
template <class E, class I>
requires is_expr_v<E>
auto gather(E const &e, int axis, I const &index) { return gather(e.eval(), axis, index); }

template <class A, class B>
requires((is_expr_v<A> || is_expr_v<B>)&&detail::lz::lazy_operand<A>
             &&detail::lz::lazy_operand<B>) auto matmul(A const &a, B const &b) {
  return matmul(detail::materialize(a), detail::materialize(b));
}

} // namespace dualcast
