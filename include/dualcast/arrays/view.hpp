// dualcast/arrays/view.hpp: non-owning strided views of arrays (numpy-like: any strides, in
// elements).
//
// A view is a pointer, a shape and one stride per dimension. Transposes, slices and broadcasts
// are views too (a broadcast dimension has stride 0). Views do not know their device; the
// executor a view is used with decides where its memory must live.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/core/config.hpp>
#include <dualcast/core/errors.hpp>

#include <string>
#include <type_traits>
#include <utility>

namespace dualcast {

namespace detail {
// Whether extents s with these strides lay their elements out row-major without gaps (extents of
// 1 take any stride): a view's, or a tensor's read in place.
inline bool dense_strides(shape const &s, index_t const *stride) {
  index_t st = 1;
  for (int i = s.rank - 1; i >= 0; --i) {
    if (s.ext[i] != 1 && stride[i] != st)
      return false;
    st *= s.ext[i];
  }
  return true;
}
} // namespace detail

template <class T> class view {
public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;

  view() = default;
  // A contiguous row-major array of the given shape.
  view(T *data, shape const &s) : data_(data), shape_(s) {
    index_t st = 1;
    for (int i = s.rank - 1; i >= 0; --i) {
      stride_[i] = st;
      st *= s.ext[i];
    }
  }
  // Any strides (in elements, may be zero or negative).
  view(T *data, shape const &s, std::initializer_list<index_t> strides) : data_(data), shape_(s) {
    if (static_cast<int>(strides.size()) != s.rank)
      throw shape_error("dualcast::view: " + std::to_string(strides.size()) +
                        " strides for shape " + to_string(s));
    int i = 0;
    for (index_t x : strides)
      stride_[i++] = x;
  }
  view(T *data, shape const &s, index_t const *strides) : data_(data), shape_(s) {
    for (int i = 0; i < s.rank; ++i)
      stride_[i] = strides[i];
  }
  // From a whole stride array (a tensor's, max_rank long): every stride written at once, those
  // past the rank as zeros. (Element by element over the zeros, as above, a view read whole soon
  // after -- copied, its shape compared -- waited for those stores to retire: a store-forwarding
  // stall, 13 % of a small D-LSTM objective's time, issue 36.)
  static view of_strides(T *data, shape const &s, index_t const (&strides)[max_rank]) {
    view r;
    r.data_ = data, r.shape_ = s;
    for (int i = 0; i < max_rank; ++i)
      r.stride_[i] = i < s.rank ? strides[i] : 0;
    return r;
  }
  // view<T> converts to view<const T>.
  template <class U>
  requires(std::is_same_v<T, U const> && !std::is_same_v<T, U>)
      view(view<U> const &o) // NOLINT(google-explicit-constructor)
      : view(o.data(), o.dims(), o.strides()) {}

  T *data() const { return data_; }
  shape const &dims() const { return shape_; }
  int rank() const { return shape_.rank; }
  index_t extent(int i) const { return shape_.ext[i]; }
  index_t stride(int i) const { return stride_[i]; }
  index_t const *strides() const { return stride_; }
  index_t size() const { return shape_.size(); }
  bool is_contiguous() const { return detail::dense_strides(shape_, stride_); }

  // The element at a multi-index (host memory only).
  template <class... I> T &operator()(I... i) const {
    index_t idx[] = {static_cast<index_t>(i)..., 0};
    index_t off = 0;
    for (int d = 0; d < static_cast<int>(sizeof...(I)); ++d)
      off += idx[d] * stride_[d];
    return data_[off];
  }

  // Dimensions a and b swapped (a transpose for rank 2).
  view transposed(int a = 0, int b = 1) const {
    check_dim("transposed", a);
    check_dim("transposed", b);
    view r = *this;
    std::swap(r.shape_.ext[a], r.shape_.ext[b]);
    std::swap(r.stride_[a], r.stride_[b]);
    return r;
  }
  // Elements begin, begin + step, ... < end along dimension d (step > 0).
  view slice(int d, index_t begin, index_t end, index_t step = 1) const {
    check_dim("slice", d);
    if (step <= 0 || begin < 0 || end < begin || end > shape_.ext[d])
      throw index_error("dualcast::view::slice: range [" + std::to_string(begin) + ", " +
                        std::to_string(end) + ") step " + std::to_string(step) +
                        " is out of bounds for dimension " + std::to_string(d) + " of extent " +
                        std::to_string(shape_.ext[d]));
    view r = *this;
    r.data_ = data_ + begin * stride_[d];
    r.shape_.ext[d] = (end - begin + step - 1) / step;
    r.stride_[d] = stride_[d] * step;
    return r;
  }
  // numpy broadcast_to: a view of the given shape with stride 0 on broadcast dimensions.
  view broadcast_to(shape const &s) const {
    bool ok = true;
    shape b = broadcast_pair(shape_, s, ok);
    if (!ok || !(b == s))
      throw shape_error("dualcast::view::broadcast_to: shape " + to_string(shape_) +
                        " does not broadcast to " + to_string(s));
    view r(data_, s);
    for (int i = 0; i < s.rank; ++i) {
      int j = rank() - s.rank + i;
      r.stride_[i] = (j < 0 || shape_.ext[j] == 1) ? 0 : stride_[j];
    }
    return r;
  }

private:
  void check_dim(char const *op, int d) const {
    if (d < 0 || d >= rank())
      throw index_error(std::string("dualcast::view::") + op + ": dimension " + std::to_string(d) +
                        " out of range for rank " + std::to_string(rank()));
  }
  T *data_ = nullptr;
  shape shape_{};
  index_t stride_[max_rank] = {};
};

template <class T> view(T *, shape const &) -> view<T>;

template <class T> struct is_view : std::false_type {};
template <class T> struct is_view<view<T>> : std::true_type {};
template <class T> inline constexpr bool is_view_v = is_view<std::remove_cvref_t<T>>::value;

} // namespace dualcast
