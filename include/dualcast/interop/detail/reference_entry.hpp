// dualcast/interop/detail/reference_entry.hpp: a kernel's forward and VJP called from C with plain
// pointers and shapes, without a framework: what the Python tests compare the PyTorch operators and
// the XLA FFI operations with, bit for bit, and what bench/interop/jax_lstm_cell.py times as "the
// same kernel called from C++". Defined in the library that registers the operators, so that the
// reference is the same compilation of the kernel (the compiler's multiply-add contractions depend
// on what else a translation unit holds: a separate program differed in the last bit).
//
//   DUALCAST_REFERENCE_ENTRY(name, kernel[, active input positions...])
// defines extern "C" int dualcast_ref_NAME(int mode, int is_double, int n_args,
//   void const *const *args, int const *ranks, long long const *dims, int n_res,
//   void *const *res, int const *res_ranks, long long const *res_dims, char *err, int err_len)
// mode 0: args = the inputs, res = the outputs (dualcast::apply); mode 1: args = the inputs, then
// one cotangent per output, res = the differentiated inputs' cotangents (dualcast::vjp). Arrays
// are dense row-major; dims holds 8 extents per array. Returns 0, or 1 with dualcast's message in
// err. Threads: dualcast::cpu{} (OpenMP's).
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/arrays/view.hpp>
#include <dualcast/backend/cpu.hpp>
#include <dualcast/broadcast/broadcast.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/interop/detail/xla_kernel_traits.hpp>
#include <dualcast/kernel/kernel.hpp>

#include <array>
#include <cstddef>
#include <cstring>
#include <exception>
#include <string>
#include <type_traits>
#include <utility>

namespace dualcast::interop::xla::detail {

template <class T> view<T> reference_view(void const *p, int rank, long long const *dims) {
  shape s;
  s.rank = rank;
  for (int i = 0; i < rank; ++i)
    s.ext[i] = dims[i];
  return view<T>(static_cast<T *>(const_cast<void *>(p)), s);
}

template <auto const &K, class Active, int NI, int NO> struct reference {
  template <class T, std::size_t... I, std::size_t... J>
  static void forward(void const *const *a, int const *r, long long const *d, void *const *o,
                      int const *orank, long long const *od, std::index_sequence<I...>,
                      std::index_sequence<J...>) {
    dualcast::apply(cpu{}, K, dualcast::out(reference_view<T>(o[J], orank[J], od + 8 * J)...),
                    view<T const>(reference_view<T>(a[I], r[I], d + 8 * I))...);
  }
  template <class T, std::size_t... I, std::size_t... J, std::size_t... A>
  static void vjp(void const *const *a, int const *r, long long const *d, void *const *o,
                  int const *orank, long long const *od, std::index_sequence<I...>,
                  std::index_sequence<J...>, std::index_sequence<A...>) {
    constexpr std::size_t ni = sizeof...(I);
    dualcast::vjp(
        cpu{}, K, Active{}, dualcast::out(reference_view<T>(o[A], orank[A], od + 8 * A)...),
        dualcast::in(view<T const>(reference_view<T>(a[I], r[I], d + 8 * I))...),
        dualcast::in(view<T const>(reference_view<T>(a[ni + J], r[ni + J], d + 8 * (ni + J)))...));
  }
  static int call(int mode, int is_double, int n_args, void const *const *a, int const *r,
                  long long const *d, int n_res, void *const *o, int const *orank,
                  long long const *od, char *err, int err_len) {
    try {
      auto is = std::make_index_sequence<std::size_t(NI)>{};
      auto js = std::make_index_sequence<std::size_t(NO)>{};
      if (mode == 0) {
        if (n_args != NI || n_res != NO)
          throw error("reference: wrong argument or result count");
        if (is_double)
          forward<double>(a, r, d, o, orank, od, is, js);
        else
          forward<float>(a, r, d, o, orank, od, is, js);
      } else {
        if (n_args != NI + NO || n_res != Active::count)
          throw error("reference: wrong argument or result count");
        auto as = std::make_index_sequence<std::size_t(Active::count)>{};
        if (is_double)
          vjp<double>(a, r, d, o, orank, od, is, js, as);
        else
          vjp<float>(a, r, d, o, orank, od, is, js, as);
      }
    } catch (std::exception const &e) {
      if (err_len > 0) {
        std::strncpy(err, e.what(), std::size_t(err_len - 1));
        err[err_len - 1] = 0;
      }
      return 1;
    }
    return 0;
  }
};

} // namespace dualcast::interop::xla::detail

#define DUALCAST_REFERENCE_ENTRY(name, K, ...)                                                     \
  extern "C" __attribute__((visibility("default"))) int dualcast_ref_##name(                       \
      int mode, int is_double, int n_args, void const *const *args, int const *ranks,              \
      long long const *dims, int n_res, void *const *res, int const *res_ranks,                    \
      long long const *res_dims, char *err, int err_len) {                                         \
    using F_ = std::remove_cvref_t<decltype(K.f)>;                                                 \
    constexpr int ni_ = ::dualcast::interop::xla::detail::arity<F_>();                             \
    using R_ = ::dualcast::interop::xla::detail::reference<                                        \
        K, ::dualcast::interop::xla::detail::active_t<K __VA_OPT__(, ) __VA_ARGS__>, ni_,          \
        ::dualcast::interop::xla::detail::output_count<F_>()>;                                     \
    return R_::call(mode, is_double, n_args, args, ranks, dims, n_res, res, res_ranks, res_dims,   \
                    err, err_len);                                                                 \
  }                                                                                                \
  static_assert(true)
