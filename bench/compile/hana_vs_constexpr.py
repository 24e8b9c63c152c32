#!/usr/bin/env python3
"""Writes two translation units that compute the same 300 active sets (the argument positions of
the tape variables among a fused call's arguments, as ops/fused/args.hpp does) -- one with C++20
constexpr code, the way dualcast computes them, one with Boost.Hana -- into the folder given as
the first argument. bench/compile-time compiles both and records time and memory."""
import pathlib
import random
import sys

out = pathlib.Path(sys.argv[1])
random.seed(1)
uses = "\n".join(
    f"using a{i} = active_of<{', '.join(random.choice('VSD') for _ in range(3 + i % 20))}>; "
    f"static_assert(a{i}::count >= 0);" for i in range(300))
common = """#include <array>
#include <type_traits>
#include <utility>
template <int C, int... I> struct active_set { static constexpr int count = sizeof...(I); };
struct V {}; struct S {}; struct D {}; // a variable, a scalar, a tensor
template <class A> inline constexpr bool is_var_v = std::is_same_v<A, V>;
"""
constexpr_version = common + """
template <class... A> inline constexpr int var_count = (0 + ... + (is_var_v<A> ? 1 : 0));
template <class... A> constexpr auto var_positions() {
  std::array<int, var_count<A...> + 1> p{};
  bool is[] = {is_var_v<A>..., false};
  int n = 0;
  for (int i = 0; i < int(sizeof...(A)); ++i)
    if (is[i])
      p[std::size_t(n++)] = i;
  return p;
}
template <class... A, std::size_t... I> constexpr auto make_active(std::index_sequence<I...>) {
  constexpr auto p = var_positions<A...>();
  return active_set<8, p[I]...>{};
}
template <class... A>
using active_of = decltype(make_active<A...>(std::make_index_sequence<var_count<A...>>{}));
"""
hana_version = common + """
#include <boost/hana/at.hpp>
#include <boost/hana/filter.hpp>
#include <boost/hana/range.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>
#include <boost/hana/unpack.hpp>
namespace hana = boost::hana;
template <class... A> constexpr auto make_active() {
  constexpr auto types = hana::tuple_t<A...>;
  constexpr auto positions = hana::filter(
      hana::to_tuple(hana::make_range(hana::int_c<0>, hana::int_c<int(sizeof...(A))>)),
      [](auto i) { return hana::bool_c<is_var_v<typename decltype(+hana::at(types, i))::type>>; });
  return hana::unpack(positions, [](auto... p) { return active_set<8, decltype(p)::value...>{}; });
}
template <class... A> using active_of = decltype(make_active<A...>());
"""
(out / "active_sets_constexpr.cpp").write_text(constexpr_version + uses + "\nint main() {}\n")
(out / "active_sets_hana.cpp").write_text(hana_version + uses + "\nint main() {}\n")
