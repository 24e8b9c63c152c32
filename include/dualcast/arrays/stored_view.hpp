// dualcast/arrays/stored_view.hpp: views whose element type (float, bfloat16 or half) is known at
// run time, for fused calls that mix storage precisions (a float cell state beside bfloat16
// gates). Such a call computes in float; each array keeps its own storage, named by a tag that
// travels with its pointer down to the backend (backend/map_params.hpp), which widens on load and
// rounds once on store. One erased view type keeps the call's checks and launch plan compiled once,
// whatever mix of precisions a call has.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/arrays/view.hpp>
#include <dualcast/numbers/float16.hpp>

#include <cstdint>
#include <type_traits>

namespace dualcast {

// How an array's elements are stored: as the call's compute type, or as a 16-bit float.
enum class element_storage : std::uint8_t { native = 0, bfloat16 = 1, half = 2 };

template <class T> inline constexpr element_storage storage_of = element_storage::native;
template <> inline constexpr element_storage storage_of<bfloat16> = element_storage::bfloat16;
template <> inline constexpr element_storage storage_of<half> = element_storage::half;
template <class T>
inline constexpr bool is_float16_v = storage_of<std::remove_cv_t<T>> != element_storage::native;

DUALCAST_HD constexpr int storage_bytes(element_storage s, int native_bytes) {
  return s == element_storage::native ? native_bytes : 2;
}

namespace detail {

// The element type of erased views: float, bfloat16 or half, which one told by view::kind().
struct any_float {};
template <class T>
inline constexpr bool is_any_float_v = std::is_same_v<std::remove_const_t<T>, any_float>;
// What a view of E may be erased from.
template <class E>
inline constexpr bool erasable_v = std::is_same_v<std::remove_const_t<E>, float> || is_float16_v<E>;

template <class Ptr> class erased_view {
public:
  Ptr data() const { return data_; }
  shape const &dims() const { return shape_; }
  int rank() const { return shape_.rank; }
  index_t extent(int i) const { return shape_.ext[i]; }
  index_t stride(int i) const { return stride_[i]; }
  index_t const *strides() const { return stride_; }
  index_t size() const { return shape_.size(); }
  element_storage kind() const { return kind_; }
  index_t element_bytes() const { return storage_bytes(kind_, int(sizeof(float))); }

protected:
  erased_view() = default;
  template <class E> explicit erased_view(view<E> const &v) : data_(v.data()), shape_(v.dims()) {
    for (int i = 0; i < v.rank(); ++i)
      stride_[i] = v.stride(i);
    kind_ = storage_of<std::remove_const_t<E>>;
  }
  Ptr data_ = nullptr;
  shape shape_{};
  index_t stride_[max_rank] = {};
  element_storage kind_ = element_storage::native;
};

} // namespace detail

// A writable view of float, bfloat16 or half elements.
template <> class view<detail::any_float> : public detail::erased_view<void *> {
public:
  view() = default;
  template <class E>
  requires(detail::erasable_v<E> && !std::is_const_v<E>) view(view<E> const &v) // NOLINT
      : erased_view(v) {}
};
// A read-only one.
template <> class view<detail::any_float const> : public detail::erased_view<void const *> {
public:
  view() = default;
  template <class E>
  requires detail::erasable_v<E> view(view<E> const &v) // NOLINT
      : erased_view(v) {}
  view(view<detail::any_float> const &v) { // NOLINT
    data_ = v.data();
    shape_ = v.dims();
    for (int i = 0; i < v.rank(); ++i)
      stride_[i] = v.stride(i);
    kind_ = v.kind();
  }
};

namespace detail {
// The bytes per element and the storage of any view (erased or not).
template <class T> index_t element_bytes(view<T> const &v) {
  if constexpr (is_any_float_v<T>)
    return v.element_bytes();
  else
    return index_t(sizeof(T));
}
template <class T> element_storage storage_kind(view<T> const &v) {
  if constexpr (is_any_float_v<T>)
    return v.kind();
  else
    return storage_of<std::remove_const_t<T>>;
}
} // namespace detail

} // namespace dualcast
