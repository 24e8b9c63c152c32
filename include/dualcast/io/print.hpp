// dualcast/io/print.hpp: tensors and tape variables written to a stream -- element type, shape,
// device and the values, summarised like NumPy's when there are many.
//
//   std::cout << dualcast::tensor<float>::from({2, 3}, {1, 2, 3, 4, 5, 6}) << "\n";
//     tensor<float> shape (2, 3) on host
//     [[1, 2, 3],
//      [4, 5, 6]]
//   std::cout << w << "\n";                        // a variable: "var<float> requires_grad ..."
//   std::string s = dualcast::to_string(x, {.precision = 3, .edge_items = 2});
//
// Values are printed with `precision` significant digits (printf's %g), right-aligned to one
// width. A tensor of more than `threshold` elements is summarised: along every dimension longer
// than 2 * edge_items only the first and last edge_items are shown, with "..." between them.
// Rank 0 prints its single value; an undefined tensor prints "(undefined)". A CUDA tensor is
// copied to the host first (possible in nvcc translation units; elsewhere device_error).
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/backend/device.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <algorithm>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>

namespace dualcast {

struct print_options {
  int precision = 6;        // significant digits
  index_t edge_items = 3;   // shown at each end of a summarised dimension
  index_t threshold = 1000; // more elements than this: summarised
};

namespace detail {
template <class T> constexpr char const *dtype_name() {
  return std::is_same_v<T, float> ? "float" : "double";
}

template <class T> class tensor_printer {
public:
  tensor_printer(tensor<T> const &host, print_options const &o)
      : t_(host), o_(o), summarise_(host.size() > o.threshold) {}

  void write(std::ostream &os) {
    measure(0, 0);
    body(os, 0, 0);
  }

private:
  std::string format(T x) const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", o_.precision, double(x));
    return buf;
  }
  // f(i) for each shown index of dimension d; f(-1) where the ellipsis goes.
  template <class F> void each_shown(int d, F const &f) const {
    index_t const n = t_.extent(d), e = std::max<index_t>(o_.edge_items, 1);
    if (summarise_ && n > 2 * e) {
      for (index_t i = 0; i < e; ++i)
        f(i);
      f(-1);
      for (index_t i = n - e; i < n; ++i)
        f(i);
    } else {
      for (index_t i = 0; i < n; ++i)
        f(i);
    }
  }
  void measure(int d, index_t off) {
    if (d == t_.rank()) {
      width_ = std::max(width_, format(t_.data()[off]).size());
      return;
    }
    each_shown(d, [&](index_t i) {
      if (i >= 0)
        measure(d + 1, off + i * t_.stride(d));
    });
  }
  void body(std::ostream &os, int d, index_t off) const {
    int const r = t_.rank();
    if (d == r) {
      std::string const s = format(t_.data()[off]);
      os << std::string(width_ - s.size(), ' ') << s;
      return;
    }
    os << '[';
    bool first = true;
    each_shown(d, [&](index_t i) {
      if (!first) {
        if (d == r - 1)
          os << ", ";
        else
          os << ",\n"
             << std::string(std::size_t(r - d - 2), '\n') << std::string(std::size_t(d + 1), ' ');
      }
      first = false;
      if (i < 0)
        os << "...";
      else
        body(os, d + 1, off + i * t_.stride(d));
    });
    os << ']';
  }

  tensor<T> t_; // on the host
  print_options o_;
  bool summarise_;
  std::size_t width_ = 0;
};

template <class T> void print_values(std::ostream &os, tensor<T> const &t, print_options const &o) {
  tensor<T> const h = t.to(device::host());
  tensor_printer<T>(h, o).write(os);
}
} // namespace detail

// "tensor<T> shape (...) on <device>", a newline, then the values (see the file comment).
template <class T>
std::ostream &print(std::ostream &os, tensor<T> const &t, print_options const &o = {}) {
  os << "tensor<" << detail::dtype_name<T>() << ">";
  if (!t.defined())
    return os << " (undefined)";
  os << " shape " << to_string(t.dims()) << " on " << to_string(t.dev()) << "\n";
  detail::print_values(os, t, o);
  return os;
}
// "var<T> requires_grad | constant shape (...) on <device>", a newline, then the values.
template <class T>
std::ostream &print(std::ostream &os, var<T> const &v, print_options const &o = {}) {
  os << "var<" << detail::dtype_name<T>() << "> "
     << (v.requires_grad() ? (v.is_leaf() ? "requires_grad" : "requires_grad (intermediate)")
                           : "constant");
  if (!v.value().defined())
    return os << " (undefined)";
  os << " shape " << to_string(v.dims()) << " on " << to_string(v.value().dev()) << "\n";
  detail::print_values(os, v.value(), o);
  return os;
}

template <class T> std::string to_string(tensor<T> const &t, print_options const &o = {}) {
  std::ostringstream s;
  print(s, t, o);
  return s.str();
}
template <class T> std::string to_string(var<T> const &v, print_options const &o = {}) {
  std::ostringstream s;
  print(s, v, o);
  return s.str();
}

inline namespace DUALCAST_TAPE_ABI { // found by argument-dependent lookup with tensor and var
template <class T> std::ostream &operator<<(std::ostream &os, tensor<T> const &t) {
  return print(os, t);
}
template <class T> std::ostream &operator<<(std::ostream &os, var<T> const &v) {
  return print(os, v);
}
} // namespace DUALCAST_TAPE_ABI

} // namespace dualcast
