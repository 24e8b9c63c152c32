// dualcast/ops/lazy/tree.hpp: the tree of a lazy elementwise expression -- trivially copyable
// nodes (the operations as types, scalar leaves as values, never a reference) evaluated inside a
// fused kernel on a context of leaf values -- and the tree algebra materialisation needs:
// shifting leaf indices when two trees are joined, and finding a subtree shared by two outputs.
#pragma once

#include <dualcast/core/config.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/numbers/detail/tuple.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace dualcast::detail::lz {

// ---- the tree: trivially copyable nodes evaluated on a context of leaf values ------------------
// Unique over the process: a thread takes a block of 2^40 ids at its first one and counts within it
// (an atomic increment per operator was a tenth of building an LSTM step's expressions).
inline std::uint64_t next_id() {
  static std::atomic<std::uint64_t> blocks{0};
  thread_local std::uint64_t n = blocks.fetch_add(1, std::memory_order_relaxed) << 40;
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
template <class Op, class A, class B, class D> struct ternary { // where(c, a, b), clamp(x, lo, hi)
  A a;
  B b;
  D c;
  std::uint64_t id;
  template <class C> DUALCAST_HD auto eval(C const &ctx) const {
    return Op{}(a.eval(ctx), b.eval(ctx), c.eval(ctx));
  }
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
template <int DV, int DT, class Op, class A, class B, class D>
constexpr auto shifted(ternary<Op, A, B, D> const &n) {
  using SA = decltype(shifted<DV, DT>(n.a));
  using SB = decltype(shifted<DV, DT>(n.b));
  using SD = decltype(shifted<DV, DT>(n.c));
  return ternary<Op, SA, SB, SD>{shifted<DV, DT>(n.a), shifted<DV, DT>(n.b), shifted<DV, DT>(n.c),
                                 n.id};
}

// The kernel's copy of a tree: the same operations without their ids, which only materialisation
// reads (sharing a subexpression, the unfused mode's memo). A node keeps its kernel, and the
// kernel is copied on its way there: with the ids an LSTM step's state update was a 136-byte
// functor, copied three times per node; without them it holds only its scalars (an expression
// without scalars is an empty object: its leaves take no bytes).
template <class Op, class A> struct kunary {
  [[no_unique_address]] A a;
  template <class C> DUALCAST_HD DUALCAST_FORCEINLINE auto eval(C const &c) const {
    return Op{}(a.eval(c));
  }
};
template <class Op, class A, class B> struct kbinary {
  [[no_unique_address]] A a;
  [[no_unique_address]] B b;
  template <class C> DUALCAST_HD auto eval(C const &c) const { return Op{}(a.eval(c), b.eval(c)); }
};
template <class Op, class A, class B, class D> struct kternary {
  [[no_unique_address]] A a;
  [[no_unique_address]] B b;
  [[no_unique_address]] D c;
  template <class C> DUALCAST_HD auto eval(C const &ctx) const {
    return Op{}(a.eval(ctx), b.eval(ctx), c.eval(ctx));
  }
};
template <class N> constexpr N kernel_tree(N const &leaf) { return leaf; }
template <class Op, class A> constexpr auto kernel_tree(unary<Op, A> const &n) {
  using KA = decltype(kernel_tree(n.a));
  return kunary<Op, KA>{kernel_tree(n.a)};
}
template <class Op, class A, class B> constexpr auto kernel_tree(binary<Op, A, B> const &n) {
  using KA = decltype(kernel_tree(n.a));
  using KB = decltype(kernel_tree(n.b));
  return kbinary<Op, KA, KB>{kernel_tree(n.a), kernel_tree(n.b)};
}
template <class Op, class A, class B, class D>
constexpr auto kernel_tree(ternary<Op, A, B, D> const &n) {
  using KA = decltype(kernel_tree(n.a));
  using KB = decltype(kernel_tree(n.b));
  using KD = decltype(kernel_tree(n.c));
  return kternary<Op, KA, KB, KD>{kernel_tree(n.a), kernel_tree(n.b), kernel_tree(n.c)};
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

template <int Which> struct no_map {}; // (two types: two empty members share no address)

// The kernel functor of a materialisation: arguments are NV variables then NT tensors (after
// deduplication; unused positions are padding); the trees (kernel trees: make_tree_fn) give the
// outputs.
template <bool Direct, int NV, int NT, class... Trees> struct tree_fn {
  // Sparse partials (kernel/kernel.hpp) where each argument keeps its own type: an expression has
  // no branches, and an LSTM step's state update (nine variables, each gate on three) then runs
  // its VJP in one evaluation instead of two. With duplicates the variables share one type.
  static constexpr bool sparse_partials = Direct;
  // (the direct variant has no maps)
  template <int W, int N>
  using map_t = std::conditional_t<Direct, no_map<W>, std::array<std::uint8_t, N>>;
  [[no_unique_address]] detail::tuple<Trees...> trees;
  [[no_unique_address]] map_t<0, NV> vmap;
  [[no_unique_address]] map_t<1, NT> tmap;
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

// The kernel functor of expression trees.
template <bool Direct, int NV, int NT, class... Trees>
auto make_tree_fn(detail::tuple<Trees...> const &t, std::array<std::uint8_t, NV> const &vmap,
                  std::array<std::uint8_t, NT> const &tmap) {
  return [&]<std::size_t... K>(std::index_sequence<K...>) {
    using F = tree_fn<Direct, NV, NT, decltype(kernel_tree(get<K>(t)))...>;
    if constexpr (Direct)
      return F{detail::make_tuple(kernel_tree(get<K>(t))...), {}, {}};
    else
      return F{detail::make_tuple(kernel_tree(get<K>(t))...), vmap, tmap};
  }
  (std::index_sequence_for<Trees...>{});
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
template <class Op, class A, class B, class D> struct strip<ternary<Op, A, B, D>> {
  using type =
      ternary<Op, typename strip<A>::type, typename strip<B>::type, typename strip<D>::type>;
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
template <class S, class Op, class A, class B, class D> struct match<S, ternary<Op, A, B, D>> {
  using ab = typename match<S, binary<Op, A, B>>::sub;
  using sub = std::conditional_t<std::is_void_v<ab>, typename match<S, D>::type, ab>;
  using type = std::conditional_t<std::is_same_v<typename strip<ternary<Op, A, B, D>>::type, S>,
                                  ternary<Op, A, B, D>, sub>;
};

// The subtree of n of type M with the given id, or nullptr.
template <class M, class N> M const *find_subtree(N const &n, std::uint64_t id) {
  if constexpr (std::is_same_v<N, M>)
    if (n.id == id)
      return &n;
  if constexpr (requires { n.c; }) {
    if (auto p = find_subtree<M>(n.a, id))
      return p;
    if (auto p = find_subtree<M>(n.b, id))
      return p;
    return find_subtree<M>(n.c, id);
  } else if constexpr (requires { n.b; }) {
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

} // namespace dualcast::detail::lz
