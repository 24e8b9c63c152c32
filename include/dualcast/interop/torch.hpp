// dualcast/interop/torch.hpp: dualcast kernels as PyTorch operators, on torch's own tensors.
//
//   #include <dualcast/interop/torch.hpp>
//   constexpr auto softclip = dualcast::kernel([](auto x, auto t) {
//     return dualcast::select(x > t, t + dualcast::log(1 + (x - t)), x);
//   });
//   DUALCAST_TORCH_KERNEL(myops, softclip, softclip, .doc = "x clipped softly above t",
//                         .args = "x, t")
//
// registers two operators from one line:
//   myops::softclip(Tensor[] args) -> Tensor[]               the kernel's outputs (one fused pass)
//   myops::softclip_vjp(Tensor[] args, Tensor[] cotangents, int mask) -> Tensor[]
//       the cotangents of the inputs whose bit is set in mask (bit a: argument a), from the
//       outputs' cotangents, by dualcast::vjp: the kernel is re-evaluated on duals of only those
//       inputs (interop/active_subsets.hpp), nothing is stored beyond the inputs; an input
//       broadcast against the others gets its cotangent summed to its own shape by the VJP itself.
// The forward operator's autograd kernel (torch_function below) records a node whose backward
// calls the vjp with the inputs that need gradients, so the operator is differentiable wherever
// torch's autograd runs (Python, C++, TorchScript); dualcast.torch.load_library
// (python/dualcast/torch.py) returns it as a Python callable, finding the library's kernels
// through the C function dualcast_torch_kernels() (name, arity, outputs, documentation, argument
// names, masks). Differentiating a gradient again (double backward) raises at that second
// backward; the vjp operator itself is not differentiable and refuses to be recorded.
//
// Tensors are viewed in place (dualcast::view over data_ptr and strides, stride-0 broadcasts and
// non-contiguous layouts included), never copied. Arguments broadcast by torch's (numpy's) rules;
// the outputs have the broadcast shape. Wrong dtype (float and double only, all arguments alike),
// layout (sparse, mkldnn), device (CPU; CUDA where the library has the kernel's CUDA half; all
// arguments on one device), rank (at most dualcast::max_rank) or argument count is a
// c10::Error naming the operator and the argument (a RuntimeError in Python). Their Meta kernels
// compute the outputs' shapes only, which is what meta tensors and torch.compile's fake tensors
// need (torch.library.opcheck passes on torch >= 2.4).
//
// CPU: dualcast::cpu with torch's thread count (torch.set_num_threads). CUDA: the kernel's CUDA
// half, DUALCAST_TORCH_CUDA_KERNEL in a .cu file of the same library (interop/torch_cuda.cuh,
// compiled by nvcc without torch's headers), found by the operator's name and run with
// dualcast::cuda on torch's current stream of the arguments' device; this header then needs
// DUALCAST_TORCH_CUDA defined (dualcast_add_python_kernels does it) for c10's CUDA stream.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/arrays/view.hpp>
#include <dualcast/backend/cpu.hpp>
#include <dualcast/broadcast/broadcast.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/interop/active_subsets.hpp>
#include <dualcast/kernel/kernel.hpp>

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <dualcast/interop/kernel_calls.hpp>
#if defined(DUALCAST_TORCH_CUDA)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace dualcast::interop {

namespace detail {

// The kernels a shared library registered, for dualcast.torch.load_library: one line each,
// tab-separated: qualified name, arity, outputs, nondiff mask, argument names, documentation.
DUALCAST_INTEROP_HIDDEN inline std::string &torch_registry() {
  static std::string r;
  return r;
}

inline std::string argument_name(torch_options const &o, int a) {
  std::string all = o.args, name;
  int i = 0;
  std::size_t p = 0;
  while (p <= all.size()) {
    std::size_t q = all.find(',', p);
    if (q == std::string::npos)
      q = all.size();
    if (i++ == a) {
      name = all.substr(p, q - p);
      break;
    }
    p = q + 1;
  }
  auto b = name.find_first_not_of(' '), e = name.find_last_not_of(' ');
  std::string r = "argument " + std::to_string(a);
  if (b != std::string::npos)
    r += " (" + name.substr(b, e - b + 1) + ")";
  return r;
}

// One registered operator: what the implementations need for their work and their messages.
struct torch_op_info {
  std::string name; // "ns::name"
  torch_options opts;
  int arity = 0, outputs = 0;
};

inline std::string op_prefix(torch_op_info const &info) {
  return "dualcast op " + info.name + ": ";
}

// The element type all arguments share (float or double) and their device, checked.
inline c10::ScalarType check_arguments(torch_op_info const &info, at::TensorList args,
                                       char const *role) {
  TORCH_CHECK(!args.empty(), op_prefix(info), "no ", role, "s");
  bool const is_argument = std::string_view(role) == "argument";
  for (std::size_t a = 0; a < args.size(); ++a) {
    at::Tensor const &t = args[a];
    // The argument's name, built only for a message: TORCH_CHECK evaluates its message
    // arguments only when the check fails, and a call that passes stays free of allocations.
    auto what = [&] {
      return is_argument ? argument_name(info.opts, int(a))
                         : std::string(role) + " " + std::to_string(a);
    };
    TORCH_CHECK(t.defined(), op_prefix(info), what(), " is an undefined tensor");
    TORCH_CHECK(t.layout() == c10::kStrided, op_prefix(info), what(), " has layout ", t.layout(),
                "; dualcast views only strided (dense) tensors");
    TORCH_CHECK(t.scalar_type() == c10::kFloat || t.scalar_type() == c10::kDouble, op_prefix(info),
                what(), " has dtype ", t.scalar_type(),
                "; dualcast kernels take float32 or float64");
    TORCH_CHECK(t.scalar_type() == args[0].scalar_type(), op_prefix(info), what(), " has dtype ",
                t.scalar_type(), " but ", role, " 0 has ", args[0].scalar_type(),
                " (convert them to one dtype)");
    TORCH_CHECK(t.device() == args[0].device(), op_prefix(info), what(), " is on ", t.device(),
                " but ", role, " 0 is on ", args[0].device());
    TORCH_CHECK(t.dim() <= max_rank, op_prefix(info), what(), " has ", t.dim(),
                " dimensions; dualcast arrays have at most ", max_rank);
    TORCH_CHECK(!t.is_conj() && !t.is_neg(), op_prefix(info), what(),
                " has a lazy conjugate or negation bit");
    for (int d = 0; d < t.dim(); ++d)
      TORCH_CHECK(t.stride(d) >= 0, op_prefix(info), what(), " has a negative stride");
  }
  return args[0].scalar_type();
}

template <class T> view<T> view_of(at::Tensor const &t) {
  shape s;
  s.rank = int(t.dim());
  index_t st[max_rank] = {};
  for (int d = 0; d < s.rank; ++d) {
    s.ext[d] = t.size(d);
    st[d] = t.stride(d);
  }
  return view<T>(static_cast<T *>(t.data_ptr()), s, st);
}

// The sizes alone: what fake tensors (torch.compile's tracing) have, without data.
inline shape shape_of(at::Tensor const &t) {
  shape s;
  s.rank = int(t.dim());
  for (int d = 0; d < s.rank; ++d)
    s.ext[d] = t.size(d);
  return s;
}

inline std::vector<std::int64_t> sizes_of(shape const &s) {
  return std::vector<std::int64_t>(s.ext, s.ext + s.rank);
}

// Runs cpu(ex) on the CPU, or cuda(calls, stream) with the CUDA half of the kernel
// (DUALCAST_TORCH_CUDA_KERNEL, interop/torch_cuda.cuh) on torch's current stream.
template <class T, class Cpu, class Cuda>
void on_device(torch_op_info const &info, at::Tensor const &t, Cpu &&cpu, Cuda &&cuda) {
  if (t.device().is_cpu()) {
    cpu(dualcast::cpu{at::get_num_threads()});
    return;
  }
  if (t.device().is_cuda()) {
#if defined(DUALCAST_TORCH_CUDA)
    auto it = cuda_registry().find(info.name);
    TORCH_CHECK(it != cuda_registry().end(), op_prefix(info),
                "no CUDA implementation: register the kernel in a .cu file of the library with "
                "DUALCAST_TORCH_CUDA_KERNEL (dualcast/interop/torch_cuda.cuh)");
    c10::cuda::CUDAGuard guard(t.device());
    void *stream = c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
    cuda(it->second.template of<T>(), stream);
    return;
#else
    (void)cuda;
    TORCH_CHECK(false, op_prefix(info),
                "this library was built without CUDA (a CPU-only torch, or no .cu source with "
                "DUALCAST_TORCH_CUDA_KERNEL)");
#endif
  }
  TORCH_CHECK(false, op_prefix(info), "tensors on ", t.device(), " are not supported");
}

// Turns dualcast's own exceptions (shapes that do not broadcast, ...) into c10 errors naming
// the operator.
template <class Body> auto with_errors(torch_op_info const &info, Body &&body) {
  try {
    return body();
  } catch (dualcast::error const &e) {
    TORCH_CHECK(false, op_prefix(info), e.what());
  }
}

// shapes_only: the Meta kernel (meta tensors, and torch.compile's fake tensors, whose data
// cannot be touched): the outputs are allocated, nothing is read or computed.
template <int NI, int NO, class F, bool S>
std::vector<at::Tensor> forward(torch_op_info const &info, kernel<F, S> const &k,
                                at::TensorList args, bool shapes_only = false) {
  TORCH_CHECK(int(args.size()) == NI, op_prefix(info), "takes ", NI, " arguments (", info.opts.args,
              "), got ", args.size());
  auto dtype = check_arguments(info, args, "argument");
  return with_errors(info, [&] {
    std::vector<at::Tensor> outs;
    auto run = [&](auto zero) {
      using T = decltype(zero);
      std::array<view<T const>, NI> in;
      std::array<shape, NI> shapes;
      int pos[NI];
      for (int a = 0; a < NI; ++a) {
        shapes[std::size_t(a)] = shape_of(args[std::size_t(a)]);
        pos[a] = a;
      }
      shape const *sp = shapes.data();
      shape s = broadcast_shapes("the shapes", sp, pos, NI);
      std::array<view<T>, NO> out;
      for (int o = 0; o < NO; ++o)
        outs.push_back(at::empty(sizes_of(s), args[0].options()));
      if (shapes_only)
        return;
      for (int a = 0; a < NI; ++a)
        in[std::size_t(a)] = view_of<T const>(args[std::size_t(a)]);
      for (int o = 0; o < NO; ++o)
        out[std::size_t(o)] = view_of<T>(outs[std::size_t(o)]);
      on_device<T>(
          info, args[0], [&](auto const &ex) { run_apply<T>(ex, k, in.data(), out.data()); },
          [&](cuda_calls_of<T> const &c, void *stream) { c.apply(stream, in.data(), out.data()); });
    };
    if (dtype == c10::kFloat)
      run(0.f);
    else
      run(0.0);
    return outs;
  });
}

template <int NI, int NO, unsigned ND, class F, bool S>
std::vector<at::Tensor> backward(torch_op_info const &info, kernel<F, S> const &k,
                                 at::TensorList args, at::TensorList cotangents, std::int64_t mask,
                                 bool shapes_only = false) {
  TORCH_CHECK(int(args.size()) == NI, op_prefix(info), "vjp takes ", NI, " arguments (",
              info.opts.args, "), got ", args.size());
  TORCH_CHECK(int(cotangents.size()) == NO, op_prefix(info), "vjp takes ", NO,
              " output cotangents, got ", cotangents.size());
  TORCH_CHECK(mask >= 0 && mask < (std::int64_t(1) << NI), op_prefix(info), "vjp mask ", mask,
              " names arguments beyond the ", NI, " there are");
  TORCH_CHECK((unsigned(mask) & ND) == 0u, op_prefix(info), "vjp mask ", mask,
              " asks for the gradient of a non-differentiable argument (mask ", ND, ")");
  auto dtype = check_arguments(info, args, "argument");
  check_arguments(info, cotangents, "output cotangent");
  TORCH_CHECK(cotangents[0].scalar_type() == dtype && cotangents[0].device() == args[0].device(),
              op_prefix(info), "the output cotangents must have the arguments' dtype and device");
  constexpr int NDiff = differentiable_count<NI, ND>();
  constexpr auto diff = differentiable_positions<NI, ND>();
  unsigned sub = 0; // the mask over the differentiable arguments
  for (int j = 0; j < NDiff; ++j)
    if ((mask >> diff[std::size_t(j)]) & 1)
      sub |= 1u << j;
  std::vector<at::Tensor> grads(NI);
  // A gradient not asked for is an empty tensor (shape [0]), not an undefined one: torch.compile's
  // tracing cannot hold None in a Tensor[] (the autograd kernel turns them back into no gradient).
  auto fill_unasked = [&] {
    for (auto &g : grads)
      if (!g.defined())
        g = at::empty({0}, args[0].options());
    return grads;
  };
  if (sub == 0u)
    return fill_unasked();
  return with_errors(info, [&] {
    auto run = [&](auto zero) {
      using T = decltype(zero);
      std::array<view<T const>, NI> in;
      std::array<view<T>, NI> xbar;
      std::array<view<T const>, NO> ybar;
      unsigned run_sub = effective_mask<NDiff>(sub);
      for (int j = 0; j < NDiff; ++j)
        if ((run_sub >> j) & 1u) {
          // (where all-active is the fallback, the cotangents not asked for go to scratch)
          std::size_t a = std::size_t(diff[std::size_t(j)]);
          grads[a] = at::empty(args[a].sizes(), args[a].options());
        }
      if (shapes_only) {
        for (int j = 0; j < NDiff; ++j)
          if (!((sub >> j) & 1u))
            grads[std::size_t(diff[std::size_t(j)])] = at::Tensor();
        return;
      }
      for (int a = 0; a < NI; ++a) {
        in[std::size_t(a)] = view_of<T const>(args[std::size_t(a)]);
        if (grads[std::size_t(a)].defined())
          xbar[std::size_t(a)] = view_of<T>(grads[std::size_t(a)]);
      }
      for (int o = 0; o < NO; ++o)
        ybar[std::size_t(o)] = view_of<T const>(cotangents[std::size_t(o)]);
      on_device<T>(
          info, args[0],
          [&](auto const &ex) {
            run_vjp_subset<NI, NO, ND>(ex, k, sub, in.data(), xbar.data(), ybar.data());
          },
          [&](cuda_calls_of<T> const &c, void *stream) {
            c.vjp(stream, sub, in.data(), xbar.data(), ybar.data());
          });
      for (int j = 0; j < NDiff; ++j)
        if (!((sub >> j) & 1u))
          grads[std::size_t(diff[std::size_t(j)])] = at::Tensor();
    };
    if (dtype == c10::kFloat)
      run(0.f);
    else
      run(0.0);
    return fill_unasked();
  });
}

// What the autograd node needs at backward: the operator and its kernel (one per registration,
// alive as long as the library).
using forward_op_signature = std::vector<at::Tensor>(at::TensorList);
using vjp_op_signature = std::vector<at::Tensor>(at::TensorList, at::TensorList, std::int64_t);

template <class F, bool S> struct torch_op {
  torch_op(torch_op_info i, kernel<F, S> const &kk) : info(std::move(i)), k(kk) {}
  torch_op_info info;
  kernel<F, S> k;

  // The autograd kernels call the operators again through torch's dispatcher, below autograd:
  // so whatever sits between (torch.compile's fake tensors and tracing, functionalization, the
  // profiler) sees the operator itself, never our kernel touching its tensors' data. (Found at
  // the first call: the schemas exist once the library's registration has run.)
  std::vector<at::Tensor> call_forward(at::TensorList args) const {
    find_handles();
    return forward_handle->call(args);
  }
  std::vector<at::Tensor> call_vjp(at::TensorList args, at::TensorList cot,
                                   std::int64_t mask) const {
    find_handles();
    return vjp_handle->call(args, cot, mask);
  }

private:
  void find_handles() const {
    std::call_once(found, [this] {
      auto &d = c10::Dispatcher::singleton();
      forward_handle = d.findSchemaOrThrow(info.name.c_str(), "").typed<forward_op_signature>();
      vjp_handle = d.findSchemaOrThrow((info.name + "_vjp").c_str(), "").typed<vjp_op_signature>();
    });
  }
  mutable std::once_flag found;
  mutable c10::optional<c10::TypedOperatorHandle<forward_op_signature>> forward_handle;
  mutable c10::optional<c10::TypedOperatorHandle<vjp_op_signature>> vjp_handle;
};

// A gradient taken with create_graph=True: differentiating it again raises. (Returned as it is,
// it would be a constant to autograd, and a second derivative through it would silently lack
// this operation's part: pytorch issues 58509, 76185.)
struct no_double_backward : torch::autograd::Function<no_double_backward> {
  static at::Tensor forward(torch::autograd::AutogradContext *ctx, std::string const &name,
                            at::Tensor const &r, at::TensorList /*anchors*/) {
    ctx->saved_data["name"] = name;
    return r.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                 torch::autograd::variable_list) {
    TORCH_CHECK(false, "dualcast op ", ctx->saved_data["name"].toStringRef(),
                ": differentiating its gradient (double backward) is not supported: the backward "
                "is a fused kernel of its own; take the gradient once, or write the derivative "
                "you need as a kernel");
  }
};

// The forward operator's autograd kernel: the forward pass, and a node whose backward runs the
// vjp over the inputs that need gradients (ctx->needs_input_grad), from the saved inputs only
// (save_for_backward: torch's version counters catch an input modified in place meanwhile).
template <int NI, int NO, unsigned ND, class F, bool S>
struct torch_function : torch::autograd::Function<torch_function<NI, NO, ND, F, S>> {
  using op_t = torch_op<F, S>;
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext *ctx,
                                                op_t const *op, at::TensorList args) {
    ctx->saved_data["op"] = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(op));
    ctx->save_for_backward(args.vec());
    at::AutoDispatchBelowADInplaceOrView below;
    return op->call_forward(args);
  }
  static std::vector<at::Tensor> forward_impl(op_t const *op, at::TensorList args,
                                              bool shapes_only = false) {
    return detail::forward<NI, NO>(op->info, op->k, args, shapes_only);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                 torch::autograd::variable_list cot) {
    auto const *op =
        reinterpret_cast<op_t const *>(static_cast<std::intptr_t>(ctx->saved_data["op"].toInt()));
    auto args = ctx->get_saved_variables();
    std::int64_t mask = 0;
    for (int a = 0; a < NI; ++a)
      if (ctx->needs_input_grad(std::size_t(a)) && !((ND >> a) & 1u))
        mask |= std::int64_t(1) << a;
    torch::autograd::variable_list res(static_cast<std::size_t>(NI) +
                                       1); // (the first: op, not a tensor)
    if (mask == 0)
      return res;
    // An output nobody used has no cotangent where autograd does not materialise it (AOT
    // autograd's traced backward): zeros of the outputs' common shape, so that the vjp operator's
    // Tensor[] holds tensors only.
    auto used =
        std::find_if(cot.begin(), cot.end(), [](at::Tensor const &t) { return t.defined(); });
    if (used == cot.end())
      return res;
    for (auto &t : cot)
      if (!t.defined())
        t = at::zeros_like(*used);
    std::vector<at::Tensor> g;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      g = op->call_vjp(args, cot, mask);
    }
    // create_graph=True: the gradients must not look constant to autograd. (The anchors go in as
    // a TensorList: a std::vector would not count as variables.)
    std::vector<at::Tensor> anchors;
    if (c10::GradMode::is_enabled()) {
      for (auto const *l : {&args, &cot})
        for (auto const &t : *l)
          if (t.defined() && t.requires_grad())
            anchors.push_back(t);
    }
    for (int a = 0; a < NI; ++a) {
      auto &r = g[std::size_t(a)];
      if (!((mask >> a) & 1))
        continue; // (its entry is the vjp operator's empty placeholder)
      res[std::size_t(a) + 1] =
          anchors.empty() || !r.defined()
              ? r
              : no_double_backward::apply(op->info.name, r, at::TensorList(anchors));
    }
    return res;
  }
};

// The vjp operator's autograd kernel: not differentiable itself, so refused where autograd
// would record it (its outputs would silently carry no gradient).
inline void refuse_recording(torch_op_info const &info, at::TensorList args) {
  if (!c10::GradMode::is_enabled())
    return;
  for (std::size_t a = 0; a < args.size(); ++a)
    TORCH_CHECK(!args[a].defined() || !args[a].requires_grad(), op_prefix(info), "the vjp of ",
                argument_name(info.opts, int(a)),
                " requires grad: the vjp operator is not differentiable (call it under "
                "torch.no_grad())");
}

template <unsigned ND, class F, bool S>
void register_torch_kernel(torch::Library &m, char const *ns, char const *name,
                           kernel<F, S> const &k, torch_options const &opts) {
  constexpr int NI = kernel_arity<F, float>();
  static_assert(NI >= 1, "DUALCAST_TORCH_KERNEL: the kernel cannot be called with 1 to 16 "
                         "float arguments");
  constexpr int NO = outputs_of_views<F, float>(std::make_index_sequence<NI>{});
  static_assert(NO >= 1, "DUALCAST_TORCH_KERNEL: see the kernel's error above");
  torch_op_info info{std::string(ns) + "::" + name, opts, NI, NO};
  // (held by the registration's closures and the autograd nodes: as long as the library)
  auto op = std::make_shared<torch_op<F, S> const>(info, k);
  using fn = torch_function<NI, NO, ND, F, S>;
  std::string vjp_name = std::string(name) + "_vjp";
  m.def((std::string(name) + "(Tensor[] args) -> Tensor[]").c_str());
  m.def((vjp_name + "(Tensor[] args, Tensor[] cotangents, int mask) -> Tensor[]").c_str());
  // One implementation for every backend (it picks the executor by the arguments' device) ...
  m.impl(name,
         torch::dispatch(c10::DispatchKey::CompositeExplicitAutograd,
                         [op](at::TensorList args) { return fn::forward_impl(op.get(), args); }));
  m.impl(vjp_name.c_str(),
         torch::dispatch(c10::DispatchKey::CompositeExplicitAutograd,
                         [op](at::TensorList args, at::TensorList cot, std::int64_t mask) {
                           return backward<NI, NO, ND>(op->info, op->k, args, cot, mask);
                         }));
  // ... but the Meta kernels only allocate: torch.compile traces with fake tensors (the Meta
  // key, and a device that is not meta) whose data must not be read ...
  m.impl(name, torch::dispatch(c10::DispatchKey::Meta, [op](at::TensorList args) {
           return fn::forward_impl(op.get(), args, true);
         }));
  m.impl(vjp_name.c_str(),
         torch::dispatch(c10::DispatchKey::Meta,
                         [op](at::TensorList args, at::TensorList cot, std::int64_t mask) {
                           return backward<NI, NO, ND>(op->info, op->k, args, cot, mask, true);
                         }));
  // ... and the autograd kernels: the forward records the node above, the vjp is refused where
  // it would be recorded.
  m.impl(name, torch::dispatch(c10::DispatchKey::Autograd,
                               [op](at::TensorList args) { return fn::apply(op.get(), args); }));
  m.impl(vjp_name.c_str(),
         torch::dispatch(c10::DispatchKey::Autograd,
                         [op](at::TensorList args, at::TensorList cot, std::int64_t mask) {
                           refuse_recording(op->info, args);
                           refuse_recording(op->info, cot);
                           at::AutoDispatchBelowADInplaceOrView below;
                           return op->call_vjp(args, cot, mask);
                         }));
  auto clean = [](char const *s) {
    std::string r = s;
    for (char &c : r)
      if (c == '\t' || c == '\n')
        c = ' ';
    return r;
  };
  torch_registry() += info.name + "\t" + std::to_string(NI) + "\t" + std::to_string(NO) + "\t" +
                      std::to_string(ND) + "\t" + clean(opts.args) + "\t" + clean(opts.doc) + "\n";
}

} // namespace detail
} // namespace dualcast::interop

// The library's list of kernels (see torch_registry), for dualcast.torch.load_library; one
// definition per shared library (inline, kept by `used`, exported with default visibility).
extern "C" __attribute__((used, visibility("default"))) inline char const *
dualcast_torch_kernels() {
  return dualcast::interop::detail::torch_registry().c_str();
}

// Registers `kernel` (a dualcast::kernel constant) as the operators ns::name and ns::name_vjp;
// the optional designated initializers set dualcast::interop::torch_options (.doc, .args,
// .nondiff). One line per kernel, at namespace scope, in any number of translation units.
#define DUALCAST_TORCH_KERNEL(ns, name, kernel, ...)                                               \
  TORCH_LIBRARY_FRAGMENT(ns, m) {                                                                  \
    static constexpr ::dualcast::interop::torch_options dualcast_torch_opts{__VA_ARGS__};          \
    ::dualcast::interop::detail::register_torch_kernel<dualcast_torch_opts.nondiff>(               \
        m, #ns, #name, kernel, dualcast_torch_opts);                                               \
  }
