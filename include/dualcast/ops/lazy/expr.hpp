// dualcast/ops/lazy/expr.hpp: dualcast::expr, a lazy elementwise expression over tape
// variables, and how operands join into one.
//
// An expr holds a tree (ops/lazy/tree.hpp) and its array leaves by value: the variables (shared
// handles) and the constant tensors, each with its storage version at capture (materialising
// after a leaf was modified in place throws dualcast::version_error: the expr would otherwise see
// the new values). Joining operands checks shapes and tapes at once, so that errors point at the
// operation that caused them.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/ops/lazy/tree.hpp>
#include <dualcast/tape/policy.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/recycling_allocator.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace dualcast {

inline namespace DUALCAST_TAPE_ABI { // see tensor/detail/device_dispatch.hpp
template <class T, class Tree, int NV, int NT> class expr;
}

template <class E> struct is_expr : std::false_type {};
template <class T, class Tree, int NV, int NT>
struct is_expr<expr<T, Tree, NV, NT>> : std::true_type {};
template <class E> inline constexpr bool is_expr_v = is_expr<std::remove_cvref_t<E>>::value;

namespace detail::lz {
// An expr's materialised variable, shared by its copies: made by the first copy or the first
// materialisation, not with the expr (each operator makes an expr, most of them temporaries
// that no one copies or materialises: they made a heap block each, 3 of the 5 of tanh(x * w + b)).
template <class T> class shared_result {
public:
  shared_result() = default;
  shared_result(std::nullptr_t) {} // NOLINT(google-explicit-constructor): never shared
  shared_result(shared_result const &o) : p_(o.share()) {}
  shared_result(shared_result &&) noexcept = default;
  shared_result &operator=(shared_result const &o) {
    p_ = o.share();
    return *this;
  }
  shared_result &operator=(shared_result &&) noexcept = default;
  // The cached variable (null: not materialised yet).
  var<T> const *get() const { return p_ && p_->owner() ? p_.get() : nullptr; }
  void set_if_shared(var<T> const &v) const {
    if (p_)
      *p_ = v;
  }
  void set(var<T> const &v) const {
    if (!p_)
      p_ = make();
    *p_ = v;
  }

private:
  std::shared_ptr<var<T>> const &share() const {
    if (!p_)
      p_ = make();
    return p_;
  }
  static std::shared_ptr<var<T>> make() { // (recycled blocks: one per materialisation)
    return std::allocate_shared<var<T>>(detail::recycling_allocator<var<T>>{});
  }
  mutable std::shared_ptr<var<T>> p_;
};
} // namespace detail::lz

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
  template <class P = decltype(policy::automatic)> var<T> eval(P pol = {}) const;
  operator var<T>() const & { return eval(); } // NOLINT(google-explicit-constructor)
  // A temporary (v = a * b + c): nothing to cache unless a copy made earlier shares the cache.
  operator var<T>() && { // NOLINT(google-explicit-constructor)
    if (var<T> const *c = cache_.get())
      return *c;
    var<T> r = materialise(policy::automatic);
    cache_.set_if_shared(r);
    return r;
  }
  tensor<T> value() const { return eval().value(); }
  T item() const { return eval().item(); }

  // Internal: the materialised variable, shared by copies of this expr.
  detail::lz::shared_result<T> cache_{};
  // Internal: materialises without looking at the cache.
  template <class P> var<T> materialise(P pol) const;
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
concept leaf_operand =
    lazy_operand<A> || is_tensor_v<A> || std::is_arithmetic_v<std::remove_cvref_t<A>>;

template <class A, class B> struct pair_elem {
  using type = std::conditional_t<std::is_void_v<elem_t<A>>, elem_t<B>, elem_t<A>>;
};

// Any operand as an operand of join of element type T: exprs, variables and tensors by
// reference, as they came (join copies their leaves once, into the expr it makes, or moves them out
// of a temporary: a copy here as well was a reference count per leaf and operator level), scalars
// as scalar leaves.
template <class T, class A> decltype(auto) as_expr(A &&a) {
  if constexpr (is_expr_v<A> || is_var_v<A> || is_tensor_v<A>) {
    static_assert(std::is_same_v<elem_t<A>, T>,
                  "dualcast: elementwise operands must have one element type");
    return std::forward<A>(a);
  } else {
    return sleaf<scalar_of_t<T>>{scalar_of_t<T>(a)}; // (a real number also on a tape over duals)
  }
}

template <class X> struct leaf_counts { static constexpr int nv = 0, nt = 0; };
template <class T, class Tr, int NV, int NT> struct leaf_counts<expr<T, Tr, NV, NT>> {
  static constexpr int nv = NV, nt = NT;
};
template <class T> struct leaf_counts<var<T>> { static constexpr int nv = 1, nt = 0; };
template <class T> struct leaf_counts<tensor<T>> { static constexpr int nv = 0, nt = 1; };

template <class X> auto tree_of(X const &x) {
  if constexpr (is_expr_v<X>)
    return x.tree;
  else if constexpr (is_var_v<X>)
    return vleaf<0>{};
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

// Where a join's variable (Var) or tensor leaf I comes from: (the operand, its leaf there).
template <bool Var, std::size_t I, class... X>
constexpr std::pair<std::size_t, std::size_t> locate() {
  constexpr int counts[] = {(Var ? leaf_counts<X>::nv : leaf_counts<X>::nt)..., 0};
  std::size_t k = 0, i = I;
  while (i >= std::size_t(counts[k]))
    i -= std::size_t(counts[k++]);
  return {k, i};
}
// Operand K of a join from its tuple of forwarding references, as it came (lvalue or rvalue): each
// leaf is taken from it once, so an rvalue operand is moved from leaf by leaf, never twice.
template <std::size_t K, class Ops> decltype(auto) join_operand(Ops &ops) {
  return std::forward<std::tuple_element_t<K, Ops>>(std::get<K>(ops));
}
// Variable (Var) or tensor leaf J of operand y -- an expr, or a variable / tensor: its one leaf --
// copied, or moved out of a temporary (each of its leaves is taken once).
template <bool Var, std::size_t J, class Y> auto join_leaf(Y &&y) {
  using L = std::remove_cvref_t<Y>;
  if constexpr (!is_expr_v<L>)
    return L(std::forward<Y>(y));
  else if constexpr (Var)
    return std::get<J>(std::forward<Y>(y).vars);
  else
    return std::get<J>(std::forward<Y>(y).tensors);
}
// The storage version at capture of leaf J (variables first, then tensors) of operand y.
template <bool Var, std::size_t J, class Y> std::uint64_t leaf_version(Y const &y) {
  if constexpr (is_expr_v<Y>)
    return y.versions[(Var ? 0 : std::size_t(Y::num_vars)) + J];
  else if constexpr (is_var_v<Y>)
    return y.value().version();
  else
    return y.version();
}

// join's rare paths, out of line (inlined, their strings gave every join a frame of 350 bytes).
[[noreturn, gnu::noinline, gnu::cold]] inline void different_tapes(char const *op) {
  throw tape_error(std::string(op) + ": operands are variables of different tapes");
}
// The broadcast of shapes a and d, in b (or a shape_error naming op).
[[gnu::noinline]] inline shape const *broadcast_into(char const *op, shape const &a, shape const &d,
                                                     std::optional<shape> &b) {
  bool ok = true;
  shape const r = broadcast_pair(a, d, ok);
  if (!ok)
    throw shape_error(std::string(op) + ": shapes " + to_string(a) + " and " + to_string(d) +
                      " do not broadcast");
  return &b.emplace(r);
}

// Joins operands (exprs, variables, tensors, scalar leaves) under one operation node. The new
// expr's leaves are built in place from the operands' (moved out of temporaries: in
// sigmoid(x * w + b) each level's expr is a temporary, and a copy of its leaves cost an atomic
// reference count per variable, and as many again when the temporary died).
template <class T, class Op, class... X> auto join(char const *op, X &&...x) {
  constexpr int counts_v[] = {leaf_counts<std::remove_cvref_t<X>>::nv...};
  constexpr int counts_t[] = {leaf_counts<std::remove_cvref_t<X>>::nt...};
  constexpr int NV = (0 + ... + leaf_counts<std::remove_cvref_t<X>>::nv),
                NT = (0 + ... + leaf_counts<std::remove_cvref_t<X>>::nt);
  // Shape and tape checks now, so that errors point at the operation that caused them.
  tape *tp = nullptr;
  // The result's shape: an operand's own (equal shapes, the common case) or, where shapes differ,
  // their broadcast in `b`. (A copy into a local at each operand was read back whole at the end,
  // a wide load waiting on the narrower stores that had just written it; and a zeroed local
  // shape for the rare broadcast was a tenth of a join.)
  shape const *s = nullptr;
  std::optional<shape> b;
  auto check = [&](auto const &y) {
    using Y = std::remove_cvref_t<decltype(y)>;
    // (Whether a variable's graph is still alive -- not computed before tape::clear() -- is
    // checked where the expression records its node: every materialisation checks every leaf,
    // as every operation checks its operands, and nothing is recorded before. Checked here too,
    // it cost 3 % of a plain-operator D-LSTM's gradient.)
    if constexpr (is_expr_v<Y> || is_var_v<Y>) {
      if (tp && y.owner() != tp)
        different_tapes(op);
      tp = y.owner();
    }
    if constexpr (is_expr_v<Y> || is_var_v<Y> || is_tensor_v<Y>) {
      shape const &d = y.dims(); // (in the operand's shared core or its own object: kept below)
      if (!s)
        s = &d;
      else if (!(d == *s)) // (equal shapes, the common case, broadcast to themselves)
        s = broadcast_into(op, *s, d, b);
    } // (a scalar broadcasts with every shape)
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
    else if constexpr (sizeof...(X) == 2)
      return binary<Op, std::decay_t<decltype(get<0>(trees))>,
                    std::decay_t<decltype(get<1>(trees))>>{get<0>(trees), get<1>(trees), next_id()};
    else
      return ternary<Op, std::decay_t<decltype(get<0>(trees))>,
                     std::decay_t<decltype(get<1>(trees))>, std::decay_t<decltype(get<2>(trees))>>{
          get<0>(trees), get<1>(trees), get<2>(trees), next_id()};
  }
  (std::index_sequence_for<X...>{});

  // The leaves, each constructed once in place: the versions first (read from the operands before
  // any leaf is moved out of them), then variables and tensors.
  auto ops = std::forward_as_tuple(std::forward<X>(x)...);
  auto versions = [&]<std::size_t... I, std::size_t... J>(std::index_sequence<I...>,
                                                          std::index_sequence<J...>) {
    return std::array<std::uint64_t, std::size_t(NV + NT)>{
        leaf_version<true, locate<true, I, std::remove_cvref_t<X>...>().second>(
            std::get<locate<true, I, std::remove_cvref_t<X>...>().first>(ops))...,
        leaf_version<false, locate<false, J, std::remove_cvref_t<X>...>().second>(
            std::get<locate<false, J, std::remove_cvref_t<X>...>().first>(ops))...};
  }
  (std::make_index_sequence<std::size_t(NV)>{}, std::make_index_sequence<std::size_t(NT)>{});
  return [&]<std::size_t... I, std::size_t... J>(std::index_sequence<I...>,
                                                 std::index_sequence<J...>) {
    return expr<T, decltype(node), NV, NT>{
        node,
        {join_leaf<true, locate<true, I, std::remove_cvref_t<X>...>().second>(
            join_operand<locate<true, I, std::remove_cvref_t<X>...>().first>(ops))...},
        {join_leaf<false, locate<false, J, std::remove_cvref_t<X>...>().second>(
            join_operand<locate<false, J, std::remove_cvref_t<X>...>().first>(ops))...},
        versions,
        *s};
  }
  (std::make_index_sequence<std::size_t(NV)>{}, std::make_index_sequence<std::size_t(NT)>{});
}

template <class Op, class A> auto make_unary(char const *op, A &&a) {
  using T = elem_t<A>;
  return join<T, Op>(op, as_expr<T>(std::forward<A>(a)));
}
template <class Op, class A, class B> auto make_binary(char const *op, A &&a, B &&b) {
  using T = typename pair_elem<A, B>::type;
  return join<T, Op>(op, as_expr<T>(std::forward<A>(a)), as_expr<T>(std::forward<B>(b)));
}

template <class Op, class A, class B, class C>
auto make_ternary(char const *op, A &&a, B &&b, C &&c) {
  using T =
      std::conditional_t<std::is_void_v<elem_t<A>>, typename pair_elem<B, C>::type, elem_t<A>>;
  return join<T, Op>(op, as_expr<T>(std::forward<A>(a)), as_expr<T>(std::forward<B>(b)),
                     as_expr<T>(std::forward<C>(c)));
}

// Throws version_error if a leaf of e was modified in place since e captured it.
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

} // namespace detail::lz

} // namespace dualcast
