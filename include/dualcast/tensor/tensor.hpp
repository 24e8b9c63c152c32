// dualcast/tensor/tensor.hpp: owning, strided arrays of float, double, bfloat16 or half on a
// device, and of std::int32_t / std::int64_t for indices (storage, views, copies and fills only:
// no arithmetic, never on a tape).
//
//   auto x = dualcast::tensor<float>::zeros({256, 1024});
//   auto t = x.transposed();                 // a view: shares storage, no copy
//   auto s = x.slice(1, 0, 512);             // a view
//   auto b = bias.broadcast_to({256, 1024}); // a view with stride 0
//   x.fill_(1.0f);                           // in place: bumps the storage's version
//
// A tensor is a shared storage block (dualcast/tensor/memory.hpp: device, pool, version counter),
// an offset, a shape and strides in elements. Copies of a tensor and its views share storage and
// hence the version counter. Every in-place write through the tensor API (fill_, copy_, add_,
// scale_, mview) bumps the version, which the tape checks for tensors saved for backward.
//
// CUDA tensors (device::cuda(i)) live in the CUDA pool; tensor::to copies between devices. Their
// operations (fill_, copy_, add_, clone, ...) run on the GPU in translation units compiled by
// nvcc and throw device_error elsewhere (tensor/detail/device_dispatch.hpp).
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/arrays/stored_view.hpp>
#include <dualcast/arrays/view.hpp>
#include <dualcast/broadcast/broadcast.hpp>
#include <dualcast/broadcast/detail/call_checks.hpp>
#include <dualcast/broadcast/for_each.hpp>
#include <dualcast/core/compiled.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>
#include <dualcast/tensor/detail/dual_elements.hpp>
#include <dualcast/tensor/memory.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace dualcast {

namespace detail {
// Function objects, not lambdas: nvcc runs them on the GPU too.
struct copy_fn {
  template <class X> DUALCAST_HD X operator()(X const &x) const { return x; }
};
struct add_fn {
  template <class X, class Y> DUALCAST_HD auto operator()(X const &x, Y const &y) const {
    return x + y;
  }
};
struct scale_fn {
  template <class X, class A> DUALCAST_HD auto operator()(X const &x, A const &a) const {
    return x * a;
  }
};
// The element loop of integer tensors (no kernels over integers: kernels compute in float or
// double): dst[i] = src[i] (src broadcast to dst's shape), or dst[i] = value without src; i over
// dst's elements in row-major order, strides in elements.
template <class T> struct strided_int_copy {
  int rank = 0;
  index_t ext[max_rank] = {}, ds[max_rank] = {}, ss[max_rank] = {};
  T *dst = nullptr;
  T const *src = nullptr;
  T value = T(0);
  DUALCAST_HD void operator()(index_t i) const {
    index_t d = 0, s = 0;
    for (int k = rank - 1; k >= 0; --k) {
      index_t const c = i % ext[k];
      i /= ext[k];
      d += c * ds[k];
      s += c * ss[k];
    }
    dst[d] = src ? src[s] : value;
  }
};
inline constexpr kernel<copy_fn> copy_kernel{copy_fn{}};
inline constexpr kernel<add_fn> add_kernel{add_fn{}};
inline constexpr kernel<scale_fn> scale_kernel{scale_fn{}};
// A scalar argument of a fused call: 16-bit values go in as the float they widen to (kernels take
// arithmetic scalars; the result is rounded once on store).
template <class T> auto scalar_arg(T v) {
  if constexpr (is_float16_v<T>)
    return float(v);
  else
    return v;
}
} // namespace detail

inline namespace DUALCAST_TAPE_ABI { // see tensor/detail/device_dispatch.hpp

// One element of a tensor: converts to its value; assigning to it writes the element and bumps
// the tensor's version (the tape sees the write).
template <class T> class element_ref {
public:
  element_ref(T *p, storage *st) : p_(p), st_(st) {}
  element_ref(element_ref const &) = default;
  operator T() const { return *p_; } // NOLINT(google-explicit-constructor)
  element_ref &operator=(T v) {
    st_->bump_version();
    *p_ = v;
    return *this;
  }
  element_ref &operator=(element_ref const &o) { return *this = T(o); }
  element_ref &operator+=(T v) { return *this = *p_ + v; }
  element_ref &operator-=(T v) { return *this = *p_ - v; }
  element_ref &operator*=(T v) { return *this = *p_ * v; }
  element_ref &operator/=(T v) { return *this = *p_ / v; }

private:
  T *p_;
  storage *st_;
};

// Integer element types a tensor may hold: indices (index_select, gather, scatter, index_add,
// reduce_by_index, argmax / argmin), kept on their device.
template <class T>
inline constexpr bool is_index_element_v =
    std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>;

template <class T> class tensor {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || is_dual_v<T> ||
                    is_float16_v<T> || is_index_element_v<T>,
                "dualcast::tensor holds float, double, bfloat16 or half (16-bit storage, computed "
                "in float: docs/mixed-precision.md), dual numbers of float / double (a tape "
                "over duals, forward over reverse), or std::int32_t / std::int64_t indices");

public:
  using value_type = T;

  tensor() = default;

  // Uninitialised contiguous tensor of shape s (memory from the device's default pool, or r).
  static tensor empty(shape const &s, device d = device::host()) {
    return empty(s, d, detail::default_resource(d));
  }
  static tensor empty(shape const &s, device d, memory_resource &r);
  static tensor full(shape const &s, T v, device d = device::host());
  static tensor zeros(shape const &s, device d = device::host()) { return full(s, T(0), d); }
  // A contiguous tensor holding `values` (row-major), of shape s.
  static tensor from(shape const &s, std::vector<T> const &values);
  static tensor scalar(T v, device d = device::host()) { return full(shape{}, v, d); }

  bool defined() const { return st_ != nullptr; }
  shape const &dims() const { return shape_; }
  int rank() const { return shape_.rank; }
  index_t extent(int i) const { return shape_.ext[i]; }
  index_t stride(int i) const { return stride_[i]; }
  index_t size() const { return shape_.size(); }
  device dev() const { return st_ ? st_->dev() : device::host(); }
  std::size_t nbytes() const { return std::size_t(size()) * sizeof(T); }
  // The storage block (shared with views); identity, version and size of the memory.
  std::shared_ptr<storage> const &store() const { return st_; }
  std::uint64_t version() const { return st_ ? st_->version() : 0; }
  void bump_version() const {
    if (st_)
      st_->bump_version();
  }

  // ---- element access ---------------------------------------------------------------------
  // Every write a tensor's API offers is seen by the tape: it bumps the storage's version, which
  // backward checks for the tensors it saved (a stale save is a version_error, never a silently
  // wrong gradient). The exceptions are named raw_*: for freshly allocated results only.

  // Read-only pointer to element (0, ..., 0).
  T const *data() const { return raw_data(); }
  // Writable pointer: counts as an in-place modification now (bumps the version). Writes through
  // a pointer kept after the tape saved the tensor again are not seen: take it where you write.
  T *mutable_data() const {
    bump_version();
    return raw_data();
  }
  // Writable pointer without bumping the version (unchecked): for freshly allocated results.
  // (Null for an undefined tensor.)
  T *raw_data() const { return st_ ? static_cast<T *>(st_->data()) + offset_ : nullptr; }
  // Read access as a view.
  view<T const> cview() const { return view<T const>::of_strides(data(), shape_, stride_); }
  // Write access as a view: counts as an in-place modification (bumps the version).
  view<T> mview() const {
    bump_version();
    return raw_view();
  }
  // Write access without bumping the version (unchecked): for freshly allocated results only.
  view<T> raw_view() const { return view<T>::of_strides(raw_data(), shape_, stride_); }

  // (read in place: a view first is a 144-byte copy, and a fused node's backward asks it of every
  // gradient)
  bool is_contiguous() const { return detail::dense_strides(shape_, stride_); }

  // One element (host tensors): x(i, j) reads it, x(i, j) = v writes it and bumps the version.
  // The indices are checked (their number against the rank, each against its extent) unless
  // NDEBUG is defined; at() checks them always.
  template <class... I> element_ref<T> operator()(I... i) const {
#if !defined(NDEBUG)
    return at(i...);
#else
    return element_ref<T>(raw_data() + offset_of(i...), st_.get());
#endif
  }
  template <class... I> element_ref<T> at(I... i) const {
    static_assert((std::is_integral_v<I> && ...), "dualcast::tensor::at: integer indices");
    index_t const idx[] = {index_t(i)..., 0};
    if (int(sizeof...(I)) != rank())
      throw index_error("dualcast::tensor::at: " + std::to_string(sizeof...(I)) +
                        " indices for a tensor of rank " + std::to_string(rank()) + " (shape " +
                        to_string(shape_) + ")");
    for (int d = 0; d < rank(); ++d)
      if (idx[d] < 0 || idx[d] >= shape_.ext[d])
        throw index_error("dualcast::tensor::at: index " + std::to_string(idx[d]) +
                          " is out of range for dimension " + std::to_string(d) + " of shape " +
                          to_string(shape_));
    check_host("at");
    return element_ref<T>(raw_data() + offset_of(i...), st_.get());
  }
  T item() const;
  std::vector<T> to_vector() const {
    require_defined("to_vector");
    tensor c = to(device::host(), "dualcast::tensor::to_vector").contiguous();
    return std::vector<T>(c.data(), c.data() + c.size());
  }

  // ---- devices -------------------------------------------------------------------------------
  // The same elements on device d: this tensor itself if it is already there, else a contiguous
  // copy (synchronous: host memory is readable on return).
  tensor to(device d) const { return to(d, "dualcast::tensor::to"); }

  // ---- views ---------------------------------------------------------------------------------
  tensor transposed(int a = 0, int b = 1) const { return with_view(cview().transposed(a, b)); }
  tensor slice(int d, index_t begin, index_t end, index_t step = 1) const {
    return with_view(cview().slice(d, begin, end, step));
  }
  tensor broadcast_to(shape const &s) const { return with_view(cview().broadcast_to(s)); }
  // The sub-tensor at index i of dimension d (that dimension removed); a view.
  tensor select(int d, index_t i) const {
    if (d < 0 || d >= rank())
      throw index_error("dualcast::tensor::select: dimension " + std::to_string(d) +
                        " out of range for rank " + std::to_string(rank()));
    if (i < 0 || i >= extent(d))
      throw index_error("dualcast::tensor::select: index " + std::to_string(i) +
                        " out of range for dimension " + std::to_string(d) + " of extent " +
                        std::to_string(extent(d)));
    tensor r = *this;
    r.offset_ += i * stride_[d];
    for (int j = d; j + 1 < rank(); ++j)
      r.shape_.ext[j] = shape_.ext[j + 1], r.stride_[j] = stride_[j + 1];
    r.shape_.rank -= 1;
    return r;
  }
  // Any permutation of the dimensions.
  tensor permuted(std::vector<int> const &perm) const {
    if (int(perm.size()) != rank())
      throw shape_error("dualcast::tensor::permuted: permutation of wrong length for shape " +
                        to_string(shape_));
    tensor r = *this;
    for (int i = 0; i < rank(); ++i) {
      if (perm[i] < 0 || perm[i] >= rank())
        throw index_error("dualcast::tensor::permuted: dimension " + std::to_string(perm[i]) +
                          " out of range for rank " + std::to_string(rank()));
      r.shape_.ext[i] = shape_.ext[perm[i]];
      r.stride_[i] = stride_[perm[i]];
    }
    return r;
  }
  // Same elements, new shape: a view when contiguous, else a copy.
  tensor reshape(shape const &s) const {
    if (s.size() != size())
      throw shape_error("dualcast::tensor::reshape: cannot reshape " + to_string(shape_) + " (" +
                        std::to_string(size()) + " elements) to " + to_string(s));
    tensor c = is_contiguous() ? *this : contiguous();
    c.shape_ = s;
    c.set_contiguous_strides();
    return c;
  }
  // A contiguous tensor with the same elements (itself if already contiguous).
  tensor contiguous() const {
    if (is_contiguous())
      return *this;
    return clone();
  }
  tensor clone() const;
  // Runs f(executor) on this tensor's device (tensor/detail/device_dispatch.hpp).
  template <class F> decltype(auto) on_device(char const *op, F &&f) const {
    // The qualified name only where it can be needed (another device's errors): no string built
    // per host call. Appended, not `std::string(...) + op`, whose moved temporary g++ 12 reports
    // as a false -Warray-bounds where this is inlined.
    if (dev().is_host())
      return detail::on_device(op, dev(), detail::ambient_cpu(), std::forward<F>(f));
    std::string name("dualcast::tensor::");
    name += op;
    return detail::on_device(name, dev(), detail::ambient_cpu(), std::forward<F>(f));
  }

  // ---- in place (bump the version) ------------------------------------------------------------
  tensor const &fill_(T v) const;
  // this = src (src broadcast to this shape).
  tensor const &copy_(tensor const &src) const {
    bump_version();
    assign_raw(src);
    return *this;
  }
  // this += src (src broadcast to this shape).
  tensor const &add_(tensor const &src) const {
    static_assert(!is_index_element_v<T>, "dualcast::tensor::add_: no arithmetic on integer "
                                          "(index) tensors");
    detail::common_device("dualcast::tensor::add_", dev(), src.dev());
    if constexpr (is_dual_v<T>) {
      detail::dual_host_only("dualcast::tensor::add_", dev());
      detail::each_element(
          shape_, [](T &y, T const &x) { y = y + x; }, mview(), src.cview().broadcast_to(shape_));
    } else {
      on_device("add_", [&](auto const &ex) {
        apply(ex, detail::add_kernel, out(mview()), cview(), src.cview());
      });
    }
    return *this;
  }
  tensor const &scale_(T a) const {
    static_assert(!is_index_element_v<T>, "dualcast::tensor::scale_: no arithmetic on integer "
                                          "(index) tensors");
    if constexpr (is_dual_v<T>) {
      detail::dual_host_only("dualcast::tensor::scale_", dev());
      detail::each_element(
          shape_, [&](T &y) { y = y * a; }, mview());
    } else {
      on_device("scale_", [&](auto const &ex) {
        apply(ex, detail::scale_kernel, out(mview()), cview(), detail::scalar_arg(a));
      });
    }
    return *this;
  }

  // Internal: writes src (broadcast to this shape, on any device) into this without bumping the
  // version (fresh results).
  void assign_raw(tensor const &src) const;
  // A small host copy between dense arrays of one shape that do not overlap (the rows of stack,
  // concat and their adjoints, fresh gradients): a memcpy, not a broadcast call, which costs
  // about 100 ns of checks and dispatch per row. Anything else -- an overlap among them, which
  // apply reports -- goes to apply.
  bool copy_small_dense(tensor const &src) const;
  // Throws for an undefined tensor (a default-constructed one: the gradient of a variable that has
  // none, say), which has no elements to read.
  void require_defined(char const *op) const {
    if (!st_)
      throw error(std::string("dualcast::tensor::") + op +
                  ": the tensor is undefined (a default-constructed handle, holding no memory)");
  }
  void check_host(char const *op) const {
    if (st_ && !st_->dev().is_host())
      throw device_error(std::string("dualcast::tensor::") + op + ": tensor on " +
                         to_string(st_->dev()) +
                         " but only host tensors are supported by this operation");
  }

private:
  // Integer tensors' fill and copy (detail::strided_int_copy), on this tensor's device.
  void int_copy(char const *op, view<T> const &dst, T const *src, T v,
                view<T const> const &from = {}) const {
    detail::strided_int_copy<T> f;
    f.rank = rank();
    for (int k = 0; k < rank(); ++k)
      f.ext[k] = extent(k), f.ds[k] = dst.stride(k), f.ss[k] = src ? from.stride(k) : 0;
    f.dst = dst.data();
    f.src = src;
    f.value = v;
    on_device(op, [&](auto const &ex) { dualcast::for_each(ex, size(), f); });
  }
  template <class... I> index_t offset_of(I... i) const {
    index_t const idx[] = {index_t(i)..., 0};
    index_t off = 0;
    for (int d = 0; d < int(sizeof...(I)); ++d)
      off += idx[d] * stride_[d];
    return off;
  }
  tensor to(device d, char const *op) const;
  // n * sizeof(T) for the n elements of s (at least one element), or allocation_error when the
  // element count or the byte count does not fit (checked before s.size() could overflow).
  static std::size_t checked_bytes(shape const &s);
  tensor with_view(view<T const> const &v) const {
    tensor r = *this;
    r.offset_ = offset_ + (v.data() - static_cast<T const *>(cview().data()));
    r.shape_ = v.dims();
    for (int i = 0; i < v.rank(); ++i)
      r.stride_[i] = v.stride(i);
    return r;
  }
  void set_contiguous_strides() {
    index_t s = 1;
    for (int i = shape_.rank - 1; i >= 0; --i) {
      stride_[i] = s;
      s *= shape_.ext[i];
    }
  }

  std::shared_ptr<storage> st_;
  index_t offset_ = 0;
  shape shape_{};
  index_t stride_[max_rank] = {};
};

template <class T> tensor<T> tensor<T>::empty(shape const &s, device d, memory_resource &r) {
  tensor t;
  t.st_ = storage::allocate(checked_bytes(s), d, r);
  t.shape_ = s;
  t.set_contiguous_strides();
  return t;
}

template <class T> tensor<T> tensor<T>::full(shape const &s, T v, device d) {
  tensor t = empty(s, d);
  t.fill_(v);
  return t;
}

template <class T> tensor<T> tensor<T>::from(shape const &s, std::vector<T> const &values) {
  if (index_t(values.size()) != s.size())
    throw shape_error("dualcast::tensor::from: " + std::to_string(values.size()) +
                      " values for shape " + to_string(s));
  tensor t = empty(s);
  for (index_t i = 0; i < s.size(); ++i)
    t.raw_data()[i] = values[std::size_t(i)];
  return t;
}

template <class T> T tensor<T>::item() const {
  require_defined("item");
  if (size() != 1)
    throw shape_error("dualcast::tensor::item: tensor of shape " + to_string(shape_) +
                      " is not a single element");
  if (!dev().is_host())
    return to(device::host(), "dualcast::tensor::item").item();
  return *data();
}

template <class T> tensor<T> tensor<T>::clone() const {
  tensor r = empty(shape_, dev());
  r.assign_raw(*this);
  return r;
}

template <class T> tensor<T> const &tensor<T>::fill_(T v) const {
  if constexpr (is_index_element_v<T>) {
    bump_version();
    int_copy("fill_", raw_view(), nullptr, v);
  } else if constexpr (is_dual_v<T>) { // (plain loops: tensor/detail/dual_elements.hpp)
    detail::dual_host_only("dualcast::tensor::fill_", dev());
    detail::each_element(
        shape_, [&](T &y) { y = v; }, mview());
  } else {
    on_device("fill_", [&](auto const &ex) {
      apply(ex, detail::copy_kernel, out(mview()), detail::scalar_arg(v));
    });
  }
  return *this;
}

template <class T> void tensor<T>::assign_raw(tensor const &src) const {
  if (!(src.dev() == dev())) {
    if (src.size() == size() && src.dims() == dims() && is_contiguous()) {
      tensor c = src.contiguous();
      detail::copy_bytes("dualcast::tensor::copy", raw_data(), dev(), c.data(), c.dev(), nbytes());
      return;
    }
    assign_raw(src.to(dev(), "dualcast::tensor::copy"));
    return;
  }
  if (copy_small_dense(src))
    return;
  if constexpr (is_index_element_v<T>) {
    int_copy("copy", raw_view(), src.data(), T(0), src.cview().broadcast_to(shape_));
  } else if constexpr (is_dual_v<T>) {
    detail::dual_host_only("dualcast::tensor::copy", dev());
    detail::each_element(
        shape_, [](T &y, T const &x) { y = x; }, raw_view(), src.cview().broadcast_to(shape_));
  } else {
    on_device("copy", [&](auto const &ex) {
      apply(ex, detail::copy_kernel, out(raw_view()), src.cview());
    });
  }
}

template <class T> bool tensor<T>::copy_small_dense(tensor const &src) const {
  constexpr std::size_t small = std::size_t(64) << 10;
  if (!st_ || !src.st_ || !dev().is_host() || !(src.dims() == dims()) || nbytes() > small ||
      !is_contiguous() || !src.is_contiguous())
    return false;
  auto const to = detail::flat_interval_of<T>(raw_data(), size()),
             from = detail::flat_interval_of<T>(src.data(), size());
  if (to.lo == from.lo)
    return true; // the same elements: nothing to copy
  if (detail::intervals_meet(to, from))
    return false;
  if (nbytes() != 0)
    std::memcpy(raw_data(), src.data(), nbytes());
  return true;
}

template <class T> tensor<T> tensor<T>::to(device d, char const *op) const {
  if (dev() == d)
    return *this;
  tensor c = contiguous(); // on the source device
  tensor r = empty(shape_, d);
  detail::copy_bytes(op, r.raw_data(), d, c.data(), c.dev(), nbytes());
  return r;
}

template <class T> std::size_t tensor<T>::checked_bytes(shape const &s) {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  std::size_t n = 1;
  bool overflow = false;
  for (int i = 0; i < s.rank; ++i) {
    std::size_t e = std::size_t(s.ext[i]);
    if (e == 0)
      return sizeof(T);
    overflow = overflow || n > max / e;
    n = overflow ? n : n * e;
  }
  if (overflow || n > std::size_t(std::numeric_limits<index_t>::max()) || n > max / sizeof(T))
    throw allocation_error(
        "dualcast::tensor::empty: shape " + to_string(s) + " needs " +
        (overflow ? std::string("more than ") + std::to_string(max) + " elements"
                  : std::to_string(n) + " elements of " + std::to_string(sizeof(T)) + " bytes") +
        ", more than " + std::to_string(max) + " bytes (size overflow)");
  return n * sizeof(T);
}

// The compiled component's instantiations (dualcast/core/compiled.hpp): the members above are
// defined outside the class so that they are not inline, which lets a program linking the
// component skip compiling them.
#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE tensor<T> tensor<T>::empty(shape const &, device, memory_resource &);       \
  DUALCAST_INSTANTIATE tensor<T> tensor<T>::full(shape const &, T, device);                        \
  DUALCAST_INSTANTIATE tensor<T> tensor<T>::from(shape const &, std::vector<T> const &);           \
  DUALCAST_INSTANTIATE T tensor<T>::item() const;                                                  \
  DUALCAST_INSTANTIATE tensor<T> tensor<T>::clone() const;                                         \
  DUALCAST_INSTANTIATE tensor<T> const &tensor<T>::fill_(T) const;                                 \
  DUALCAST_INSTANTIATE void tensor<T>::assign_raw(tensor<T> const &) const;                        \
  DUALCAST_INSTANTIATE bool tensor<T>::copy_small_dense(tensor<T> const &) const;                  \
  DUALCAST_INSTANTIATE tensor<T> tensor<T>::to(device, char const *) const;                        \
  DUALCAST_INSTANTIATE std::size_t tensor<T>::checked_bytes(shape const &);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X

} // namespace DUALCAST_TAPE_ABI

namespace detail {
// dst += src (src broadcast to dst), without touching versions (gradient buffers); on their
// device.
template <class T> void add_into(tensor<T> const &dst, tensor<T> const &src) {
  char const *op = "dualcast::tape (gradient accumulation)";
  common_device(op, dst.dev(), src.dev());
  if constexpr (std::is_floating_point_v<T>) {
    // Small dense arrays of one shape on the host, apart in memory (a fused node's temporary
    // gradient of a variable it takes twice, added into the first use's: an LSTM step's h): a
    // loop, not a checked call (three quarters of the cost of such a variable's second use).
    constexpr index_t small = index_t(1) << 14;
    index_t const n = dst.size();
    if (dst.dev().is_host() && n <= small && dst.dims() == src.dims() && dst.is_contiguous() &&
        src.is_contiguous()) {
      T *const d = dst.raw_data();
      T const *const x = src.data();
      std::less_equal<T const *> const before; // (a total order, across arrays too)
      if (before(d + n, x) || before(x + n, d)) {
        for (index_t i = 0; i < n; ++i)
          d[i] += x[i];
        return;
      }
    }
  }
  if constexpr (is_dual_v<T>) { // (tensor/detail/dual_elements.hpp)
    dual_host_only(op, dst.dev());
    each_element(
        dst.dims(), [](T &y, T const &x) { y = y + x; }, dst.raw_view(),
        src.cview().broadcast_to(dst.dims()));
  } else {
    on_device(op, dst.dev(), ambient_cpu(), [&](auto const &ex) {
      apply(ex, add_kernel, out(dst.raw_view()), dst.cview(), src.cview());
    });
  }
}
// dst[i] = U(src[i]) (contiguous); a function object so that nvcc runs it on the GPU too.
template <class U, class T> struct cast_elements {
  T const *src;
  U *dst;
  DUALCAST_HD void operator()(index_t i) const { dst[i] = static_cast<U>(src[i]); }
};
// x's elements as U (float, double, bfloat16, half): x itself when it holds U, else a new
// contiguous tensor on x's device. float <-> bfloat16 / half is one fused copy (widening exact,
// narrowing rounded once to nearest even); double goes through float, so double -> 16 bits rounds
// twice (which can differ from one rounding in a tie's last bit).
template <class U, class T> tensor<U> converted(tensor<T> const &x, cpu const &host) {
  if constexpr (std::is_same_v<U, T>) {
    return x;
  } else if constexpr ((is_float16_v<U> || is_float16_v<T>)&&!std::is_same_v<U, float> &&
                       !std::is_same_v<T, float>) {
    return converted<U>(converted<float>(x, host), host);
  } else {
    if (!x.defined())
      return tensor<U>{};
    auto r = tensor<U>::empty(x.dims(), x.dev());
    if constexpr (is_float16_v<U> || is_float16_v<T>) {
      on_device("dualcast::cast", x.dev(), host,
                [&](auto const &ex) { apply(ex, copy_kernel, out(r.raw_view()), x.cview()); });
    } else {
      tensor<T> xc = x.contiguous();
      on_device("dualcast::cast", x.dev(), host, [&](auto const &ex) {
        dualcast::for_each(ex, x.size(), cast_elements<U, T>{xc.data(), r.raw_data()});
      });
    }
    return r;
  }
}

// The compiled component's instantiations (dualcast/core/compiled.hpp).
#define DUALCAST_X(T) DUALCAST_INSTANTIATE void add_into<T>(tensor<T> const &, tensor<T> const &);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X

} // namespace detail

template <class T> struct is_tensor : std::false_type {};
template <class T> struct is_tensor<tensor<T>> : std::true_type {};
template <class T> inline constexpr bool is_tensor_v = is_tensor<std::remove_cvref_t<T>>::value;

} // namespace dualcast
