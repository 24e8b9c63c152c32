// dualcast/detail/call_checks.hpp: the run-time checks of a fused call, all made before anything
// is written: the arguments broadcast together and to the outputs' shape, outputs have that shape
// and distinct elements, and no output overlaps an input it is not exactly. Messages name the
// call, the argument positions and the shapes.
#pragma once

#include <dualcast/errors.hpp>
#include <dualcast/shape.hpp>
#include <dualcast/view.hpp>
#include <dualcast/view_overlap.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>

namespace dualcast::detail {

inline std::string role_name(char const *role, int i) {
  return std::string(role) + " " + std::to_string(i);
}

template <class T>
void check_output(std::string const &op, char const *role, int i, view<T> const &v,
                  shape const &s) {
  if (!(v.dims() == s))
    throw shape_error(op + ": " + role_name(role, i) + " has shape " + to_string(v.dims()) +
                      " but the call's shape is " + to_string(s));
  // (An empty array writes nothing; its row-major strides may be 0 before a zero extent.)
  for (int d = 0; d < v.rank() && v.size() > 0; ++d)
    if (v.extent(d) > 1 && v.stride(d) == 0)
      throw aliasing_error(op + ": " + role_name(role, i) + " has stride 0 in dimension " +
                           std::to_string(d) +
                           ", so several elements would be written to one place");
}

// The broadcast shape of the array arguments, then fitted to the outputs' shape.
template <class... A> shape broadcast_args(std::string const &op, std::tuple<A const &...> args) {
  shape shapes[sizeof...(A) + 1];
  int pos[sizeof...(A) + 1] = {};
  int n = 0;
  std::apply(
      [&](auto const &...a) {
        int p = 0;
        auto add = [&](auto const &x) {
          if constexpr (is_view_v<decltype(x)>) {
            shapes[n] = x.dims();
            pos[n++] = p;
          }
          ++p;
        };
        (add(a), ...);
      },
      args);
  return broadcast_shapes(op, shapes, pos, n);
}

template <class... A>
void check_fits(std::string const &op, std::tuple<A const &...> args, shape const &s_in,
                shape const &s) {
  bool ok = true;
  shape b = broadcast_pair(s_in, s, ok);
  if (ok && b == s)
    return;
  std::apply(
      [&](auto const &...a) {
        int p = 0;
        auto test = [&](auto const &x) {
          if constexpr (is_view_v<decltype(x)>) {
            bool fits = true;
            shape bx = broadcast_pair(x.dims(), s, fits);
            if (!fits || !(bx == s))
              throw shape_error(op + ": argument " + std::to_string(p) + " of shape " +
                                to_string(x.dims()) + " does not broadcast to the output shape " +
                                to_string(s));
          }
          ++p;
        };
        (test(a), ...);
      },
      args);
}


template <class T, class... A>
void check_aliasing(std::string const &op, view<T> const *outs, char const *const *roles,
                    int const *idx, std::size_t n_out, std::tuple<A const &...> args,
                    shape const &s) {
  for (std::size_t i = 0; i < n_out; ++i) {
    for (std::size_t j = 0; j < i; ++j)
      if (overlaps(outs[i], outs[j]))
        throw aliasing_error(op + ": " + role_name(roles[i], idx[i]) + " overlaps " +
                             role_name(roles[j], idx[j]));
    std::apply(
        [&](auto const &...a) {
          int p = 0;
          auto test = [&](auto const &x) {
            if constexpr (is_view_v<decltype(x)>) {
              if (overlaps(outs[i], x) && !same_elements(outs[i], x, s))
                throw aliasing_error(op + ": " + role_name(roles[i], idx[i]) +
                                     " overlaps argument " + std::to_string(p) +
                                     " without being the same elements; write to separate memory");
            }
            ++p;
          };
          (test(a), ...);
        },
        args);
  }
}

template <class T, std::size_t NO, class... A>
void check_call(std::string const &op, std::tuple<A const &...> args,
                std::array<view<T>, NO> const &outs, char const *const (&roles)[NO],
                int const (&idx)[NO], shape const &s) {
  shape s_in = broadcast_args(op, args);
  check_fits(op, args, s_in, s);
  for (std::size_t i = 0; i < NO; ++i)
    check_output(op, roles[i], idx[i], outs[i], s);
  check_aliasing(op, outs.data(), roles, idx, NO, args, s);
}

} // namespace dualcast::detail
