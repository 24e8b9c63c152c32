// dualcast/interop/xla_ffi.hpp: a dualcast kernel as XLA FFI handlers, so that JAX can call it
// (python/dualcast/jax.py) as a differentiable operation.
//
//   constexpr auto k = dualcast::kernel([](auto x, auto y) { ... });
//   DUALCAST_XLA_KERNEL(my_op, k)                 // every input differentiated
//   DUALCAST_XLA_KERNEL(cell, dualcast::cells::hmlstm_update, 2, 3, 4, 5)  // only these inputs
//
// One line defines, with C linkage, the forward handler dualcast_xla_NAME_fwd_PLATFORM (the
// inputs -> the outputs' values, dualcast::apply) and the VJP handler
// dualcast_xla_NAME_vjp_PLATFORM (the inputs and one cotangent per output -> one cotangent
// per differentiated input, dualcast::vjp: duals re-evaluated, nothing stored; the cotangent of a
// broadcast input reduced to its own shape). The platform is `cpu` in a host translation unit
// and `cuda` in an nvcc one (XLA's stream, PlatformStream<cudaStream_t>); write the same line in
// a .cpp and a .cu file for both. Every kernel of a library is listed by the C function
// dualcast_xla_manifest(), which the Python side reads at load: names, numbers of inputs and
// outputs, the differentiated inputs, the platforms and the XLA FFI API version compiled against.
//
// Buffers are XLA's: dense, row-major, each with its own shape; inputs broadcast against each
// other by numpy's rules inside dualcast (nothing is materialised). float32 and float64; every
// input and output of one call has the same type. A wrong dtype, rank, shape or argument count is
// an ffi::Error naming the operation and the argument, which JAX raises as a Python exception;
// nothing is written before the checks pass. On the CPU the kernel runs on OpenMP's threads
// (OMP_NUM_THREADS).
//
// The XLA FFI headers come with jaxlib (python -c "import jax; print(jax.ffi.include_dir())");
// cmake/DualcastJax.cmake's dualcast_add_jax_kernels adds them. Without them this header still
// compiles (alone, as every public header must), and DUALCAST_XLA_KERNEL is a compile error that
// says what is missing.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/arrays/view.hpp>
#include <dualcast/backend/cpu.hpp>
#include <dualcast/broadcast/broadcast.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/interop/detail/xla_kernel_traits.hpp>
#include <dualcast/kernel/kernel.hpp>
#if defined(__CUDACC__)
#include <dualcast/backend/cuda.cuh>
#endif

#if __has_include(<xla/ffi/api/ffi.h>)
#include <xla/ffi/api/ffi.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dualcast::interop::xla {

namespace ffi = ::xla::ffi;

// The XLA FFI API version this translation unit was compiled against (jaxlib's header). XLA
// rejects a handler built against a newer version than the running jaxlib's; the Python side
// compares this with the installed jaxlib's header before registering anything.
inline constexpr int ffi_api_major = XLA_FFI_API_MAJOR;
inline constexpr int ffi_api_minor = XLA_FFI_API_MINOR;

namespace detail {

// One kernel of a library, as the manifest lists it.
struct entry {
  std::string name, platform;
  int inputs = 0, outputs = 0;
  std::vector<int> active;
};
__attribute__((visibility("hidden"))) inline std::vector<entry> &registry() {
  static std::vector<entry> r;
  return r;
}
__attribute__((visibility("hidden"))) inline std::mutex &registry_mutex() {
  static std::mutex m;
  return m;
}
inline bool add_entry(entry e) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().push_back(std::move(e));
  return true;
}

inline std::string dtype_name(ffi::DataType t) {
  switch (t) {
  case ffi::DataType::F32:
    return "float32";
  case ffi::DataType::F64:
    return "float64";
  case ffi::DataType::F16:
    return "float16";
  case ffi::DataType::BF16:
    return "bfloat16";
  case ffi::DataType::S32:
    return "int32";
  case ffi::DataType::S64:
    return "int64";
  case ffi::DataType::PRED:
    return "bool";
  default:
    return "XLA type " + std::to_string(int(t));
  }
}

inline ffi::Error bad(std::string const &op, std::string const &what) {
  return ffi::Error(ffi::ErrorCode::kInvalidArgument, "dualcast " + op + ": " + what);
}

// The buffers of one call, checked: count, one float type for all, rank.
struct buffers {
  std::vector<ffi::AnyBuffer> in;
  std::vector<ffi::AnyBuffer> out;
};

inline ffi::Error collect(std::string const &op, ffi::RemainingArgs const &args,
                          ffi::RemainingRets const &rets, int n_in, int n_out,
                          char const *in_role_second, int n_first, buffers &b) {
  if (int(args.size()) != n_in)
    return bad(op, "takes " + std::to_string(n_in) + " array arguments, got " +
                       std::to_string(args.size()));
  if (int(rets.size()) != n_out)
    return bad(op, "returns " + std::to_string(n_out) + " arrays, the call asked for " +
                       std::to_string(rets.size()));
  auto role = [&](int i) {
    return i < n_first ? "input " + std::to_string(i)
                       : std::string(in_role_second) + " " + std::to_string(i - n_first);
  };
  for (int i = 0; i < n_in; ++i) {
    auto a = args.get<ffi::AnyBuffer>(std::size_t(i));
    if (a.has_error())
      return bad(op, role(i) + " is not an array buffer");
    b.in.push_back(*a);
  }
  for (int i = 0; i < n_out; ++i) {
    auto r = rets.get<ffi::AnyBuffer>(std::size_t(i));
    if (r.has_error())
      return bad(op, "result " + std::to_string(i) + " is not an array buffer");
    b.out.push_back(**r);
  }
  ffi::DataType t = n_in > 0 ? b.in[0].element_type() : b.out[0].element_type();
  if (t != ffi::DataType::F32 && t != ffi::DataType::F64)
    return bad(op, role(0) + " has dtype " + dtype_name(t) +
                       "; dualcast kernels take float32 or float64");
  for (int i = 0; i < n_in; ++i) {
    if (b.in[std::size_t(i)].element_type() != t)
      return bad(op, role(i) + " has dtype " + dtype_name(b.in[std::size_t(i)].element_type()) +
                         " but input 0 has " + dtype_name(t) +
                         " (one float type for all arguments)");
    if (b.in[std::size_t(i)].dimensions().size() > std::size_t(max_rank))
      return bad(op, role(i) + " has rank " +
                         std::to_string(b.in[std::size_t(i)].dimensions().size()) +
                         "; dualcast takes at most " + std::to_string(max_rank));
  }
  for (int i = 0; i < n_out; ++i) {
    if (b.out[std::size_t(i)].element_type() != t)
      return bad(op, "result " + std::to_string(i) + " has dtype " +
                         dtype_name(b.out[std::size_t(i)].element_type()) + " but input 0 has " +
                         dtype_name(t));
    if (b.out[std::size_t(i)].dimensions().size() > std::size_t(max_rank))
      return bad(op, "result " + std::to_string(i) + " has rank above " + std::to_string(max_rank));
  }
  return ffi::Error::Success();
}

template <class T> view<T> view_of(ffi::AnyBuffer const &b) {
  auto d = b.dimensions();
  shape s;
  s.rank = int(d.size());
  for (int i = 0; i < s.rank; ++i)
    s.ext[i] = d[std::size_t(i)];
  return view<T>(static_cast<T *>(b.untyped_data()), s);
}

// The two handlers' bodies for one kernel K with differentiated inputs Active, run on executor
// ex: forward (inputs -> outputs) and VJP (inputs, output cotangents -> active inputs'
// cotangents). Any dualcast error (shapes that do not broadcast, a wrong output shape, aliasing)
// comes back as an ffi::Error; dualcast checks everything before it writes.
template <auto const &K, class Active> struct handlers {
  using F = std::remove_cvref_t<decltype(K.f)>;
  static constexpr int ni = arity<F>();
  static_assert(ni >= 1, "dualcast: DUALCAST_XLA_KERNEL: the kernel's lambda must take 1 to 16 "
                         "numbers (a fixed number: a variadic lambda has no arity to register)");
  static constexpr int no = output_count<F>();
  static constexpr int na = Active::count;

  template <class T, class Ex, std::size_t... I, std::size_t... J>
  static void forward_typed(Ex const &ex, buffers const &b, std::index_sequence<I...>,
                            std::index_sequence<J...>) {
    dualcast::apply(ex, K, dualcast::out(view_of<T>(b.out[J])...),
                    view<T const>(view_of<T>(b.in[I]))...);
  }
  // A cotangent may have a larger shape than its input, one the input broadcasts to (JAX's
  // vmap with vmap_method="expand_dims" gives an unbatched input a leading 1 and asks for a batched
  // cotangent): the input is then read as that broadcast view (stride 0), nothing copied.
  template <class T, class Ex, std::size_t... I, std::size_t... J, std::size_t... A>
  static void vjp_typed(Ex const &ex, buffers const &b, std::index_sequence<I...>,
                        std::index_sequence<J...>, std::index_sequence<A...>) {
    std::array<view<T const>, sizeof...(I)> x{view<T const>(view_of<T>(b.in[I]))...};
    for (int a = 0; a < na; ++a) {
      auto &xa = x[std::size_t(Active::positions[a])];
      shape cs = view_of<T>(b.out[std::size_t(a)]).dims();
      if (!(cs == xa.dims()))
        xa = xa.broadcast_to(cs);
    }
    dualcast::vjp(ex, K, Active{}, dualcast::out(view_of<T>(b.out[A])...), dualcast::in(x[I]...),
                  dualcast::in(view<T const>(view_of<T>(b.in[std::size_t(ni) + J]))...));
  }

  template <class Ex>
  static ffi::Error forward(Ex const &ex, char const *name, ffi::RemainingArgs args,
                            ffi::RemainingRets rets) {
    std::string op = std::string(name) + " (forward)";
    buffers b;
    if (auto e = collect(op, args, rets, ni, no, "input", ni, b); e.failure())
      return e;
    try {
      auto is = std::make_index_sequence<std::size_t(ni)>{};
      auto os = std::make_index_sequence<std::size_t(no)>{};
      if (b.in[0].element_type() == ffi::DataType::F32)
        forward_typed<float>(ex, b, is, os);
      else
        forward_typed<double>(ex, b, is, os);
    } catch (std::exception const &e) {
      return bad(op, e.what());
    }
    return ffi::Error::Success();
  }

  template <class Ex>
  static ffi::Error vjp(Ex const &ex, char const *name, ffi::RemainingArgs args,
                        ffi::RemainingRets rets) {
    std::string op = std::string(name) + " (vjp)";
    buffers b;
    if (auto e = collect(op, args, rets, ni + no, na, "output cotangent", ni, b); e.failure())
      return e;
    try {
      auto is = std::make_index_sequence<std::size_t(ni)>{};
      auto js = std::make_index_sequence<std::size_t(no)>{};
      auto as = std::make_index_sequence<std::size_t(na)>{};
      if (b.in[0].element_type() == ffi::DataType::F32)
        vjp_typed<float>(ex, b, is, js, as);
      else
        vjp_typed<double>(ex, b, is, js, as);
    } catch (std::exception const &e) {
      return bad(op, e.what());
    }
    return ffi::Error::Success();
  }

  static entry describe(char const *name, char const *platform) {
    entry e{name, platform, ni, no, {}};
    for (int a = 0; a < na; ++a)
      e.active.push_back(Active::positions[a]);
    return e;
  }
};

inline std::string manifest_text() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  // One line per kernel and platform: name, platform, inputs, outputs, differentiated inputs.
  std::string s = "dualcast-xla 1\nffi-api " + std::to_string(ffi_api_major) + "." +
                  std::to_string(ffi_api_minor) + "\n";
  for (auto const &e : registry()) {
    s += "kernel " + e.name + " " + e.platform + " " + std::to_string(e.inputs) + " " +
         std::to_string(e.outputs) + " ";
    for (std::size_t a = 0; a < e.active.size(); ++a)
      s += (a ? "," : "") + std::to_string(e.active[a]);
    s += e.active.empty() ? "-\n" : "\n";
  }
  return s;
}

} // namespace detail
} // namespace dualcast::interop::xla

// The library's manifest (see above), for the Python side: copied into buf (len bytes with the
// terminating 0); returns the length it needs, so a caller with too small a buffer retries.
// Emitted once per shared library (an inline function, kept by `used` though nothing in C++ calls
// it). No static storage: two libraries loaded into one process never see each other's lists
// (the registry's functions are hidden for the same reason).
extern "C" __attribute__((used, visibility("default"))) inline int dualcast_xla_manifest(char *buf,
                                                                                         int len) {
  std::string text = dualcast::interop::xla::detail::manifest_text();
  if (buf != nullptr && len > int(text.size()))
    std::memcpy(buf, text.c_str(), text.size() + 1);
  return int(text.size()) + 1;
}

#define DUALCAST_XLA_ACTIVE_(K, ...)                                                               \
  ::dualcast::interop::xla::detail::active_t<K __VA_OPT__(, ) __VA_ARGS__>

// One handler: the exported C symbol dualcast_xla_<name>_<sym>_<platform> binding XLA's call frame
// to the kernel's handlers_::<fn> (forward or vjp) on the platform's executor.
#if defined(__CUDACC__)
// The CUDA handlers: the kernel on XLA's stream (PlatformStream<cudaStream_t>).
#define DUALCAST_XLA_HANDLER_(name, sym, fn)                                                       \
  extern "C" __attribute__((visibility("default")))                                                \
  XLA_FFI_Error *dualcast_xla_##name##_##sym##_cuda(XLA_FFI_CallFrame *frame) {                    \
    static auto *h =                                                                               \
        ::xla::ffi::Ffi::Bind()                                                                    \
            .Ctx<::xla::ffi::PlatformStream<cudaStream_t>>()                                       \
            .RemainingArgs()                                                                       \
            .RemainingRets()                                                                       \
            .To([](cudaStream_t s, ::xla::ffi::RemainingArgs a, ::xla::ffi::RemainingRets r) {     \
              return dualcast_xla_##name##_handlers_::fn(::dualcast::cuda{s, 256, true}, #name, a, \
                                                         r);                                       \
            })                                                                                     \
            .release();                                                                            \
    return h->Call(frame);                                                                         \
  }
#define DUALCAST_XLA_PLATFORM_ "cuda"
#else
#define DUALCAST_XLA_HANDLER_(name, sym, fn)                                                       \
  extern "C" __attribute__((visibility("default")))                                                \
  XLA_FFI_Error *dualcast_xla_##name##_##sym##_cpu(XLA_FFI_CallFrame *frame) {                     \
    static auto *h =                                                                               \
        ::xla::ffi::Ffi::Bind()                                                                    \
            .RemainingArgs()                                                                       \
            .RemainingRets()                                                                       \
            .To([](::xla::ffi::RemainingArgs a, ::xla::ffi::RemainingRets r) {                     \
              return dualcast_xla_##name##_handlers_::fn(::dualcast::cpu{}, #name, a, r);          \
            })                                                                                     \
            .release();                                                                            \
    return h->Call(frame);                                                                         \
  }
#define DUALCAST_XLA_PLATFORM_ "cpu"
#endif

#define DUALCAST_XLA_DEFINE_(name, K, ...)                                                         \
  using dualcast_xla_##name##_handlers_ =                                                          \
      ::dualcast::interop::xla::detail::handlers<K, DUALCAST_XLA_ACTIVE_(K __VA_OPT__(, )          \
                                                                             __VA_ARGS__)>;        \
  DUALCAST_XLA_HANDLER_(name, fwd, forward)                                                        \
  DUALCAST_XLA_HANDLER_(name, vjp, vjp)                                                            \
  [[maybe_unused]] static bool const dualcast_xla_##name##_registered_ =                           \
      ::dualcast::interop::xla::detail::add_entry(                                                 \
          dualcast_xla_##name##_handlers_::describe(#name, DUALCAST_XLA_PLATFORM_))

// DUALCAST_XLA_KERNEL(name, kernel[, active input positions...]): the kernel's XLA FFI handlers
// (see the top of this file). `kernel` names a dualcast::kernel constant at namespace scope.
#define DUALCAST_XLA_KERNEL(name, ...) DUALCAST_XLA_DEFINE_(name, __VA_ARGS__)

#else // no XLA FFI headers on the include path

#define DUALCAST_XLA_KERNEL(name, ...)                                                             \
  static_assert(sizeof(#name) == 0,                                                                \
                "dualcast/interop/xla_ffi.hpp: XLA's FFI headers (xla/ffi/api/ffi.h) are not on "  \
                "the include path: add the directory `python -c \"import jax; "                    \
                "print(jax.ffi.include_dir())\"` prints (cmake/DualcastJax.cmake's "               \
                "dualcast_add_jax_kernels does)")

#endif
