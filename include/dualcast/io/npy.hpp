// dualcast/io/npy.hpp: tensors saved and loaded in NumPy's .npy format, which numpy.load and
// numpy.save read and write.
//
//   dualcast::save_npy("w.npy", W);                          // float -> '<f4', double -> '<f8'
//   auto W2 = dualcast::load_npy<float>("w.npy");            // >>> np.load("w.npy")
//   std::string bytes = dualcast::npy_bytes(W);              // the same, in memory
//   auto W3 = dualcast::from_npy_bytes<float>(bytes);
//
// Writing: format version 1.0, little-endian, C order, any rank (0 included), the header padded
// to a multiple of 64 bytes as NumPy does. A tensor that is not contiguous (a transposed view, a
// slice) or not on the host is written as its contiguous host copy, in row-major element order.
//
// Reading: format versions 1.0, 2.0 and 3.0; dtypes float32 and float64 in either byte order
// ('<f4', '>f4', '<f8', '>f8', '=' and '|' taken as little-endian), CONVERTED to T when they
// differ (a '<f8' file loaded as tensor<float> is rounded to float; use load_npy<double> to keep
// every bit); any other dtype is a dtype_error naming it. fortran_order True (column-major data:
// np.save of a Fortran-ordered array) loads as a strided view with the same element order as in
// NumPy: the data is read as the contiguous tensor of the reversed shape and its dimensions
// permuted back, so x(i, j) is the same element as in Python (call contiguous() for row-major
// memory). The result is on the host.
//
// Every malformed input -- a wrong magic string, an unknown version, a header that is not the
// Python dict literal NumPy writes (missing, repeated or unknown keys, bad values), a shape of
// rank above 8 or with too many elements, data shorter than the shape needs -- is a
// dualcast::io_error naming the file (or "npy data") and the problem, checked before anything is
// allocated; a file that cannot be opened, read or written too.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace dualcast {

namespace detail::npy {

inline constexpr char magic[] = "\x93NUMPY";
inline constexpr std::size_t magic_size = 6;

inline void put_u16(std::string &out, std::uint32_t v) {
  out += char(v & 0xff);
  out += char((v >> 8) & 0xff);
}
inline void put_u32(std::string &out, std::uint32_t v) {
  put_u16(out, v & 0xffff);
  put_u16(out, v >> 16);
}
inline std::uint32_t get_le(char const *p, int bytes) {
  std::uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = (v << 8) | std::uint32_t(static_cast<unsigned char>(p[i]));
  return v;
}

// What the header says.
struct header {
  int item_size = 0; // 4 (float32) or 8 (float64)
  bool swap = false; // big-endian data on this (little-endian) host, or the reverse
  bool fortran = false;
  shape dims;
};

[[noreturn]] inline void fail(std::string const &where, std::string const &what) {
  throw io_error("dualcast::load_npy: " + where + ": " + what);
}

// A parser of the header's Python dict literal:
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class header_parser {
public:
  header_parser(std::string_view text, std::string const &where) : s_(text), where_(where) {}

  header parse() {
    header h;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    skip_space();
    expect('{');
    for (;;) {
      skip_space();
      if (peek() == '}') {
        ++i_;
        break;
      }
      std::string const key = string_literal();
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        once(seen_descr, key);
        descr(string_literal(), h);
      } else if (key == "fortran_order") {
        once(seen_fortran, key);
        h.fortran = boolean();
      } else if (key == "shape") {
        once(seen_shape, key);
        h.dims = tuple();
      } else {
        fail(where_, "unexpected key '" + key +
                         "' in the header (NumPy writes descr, "
                         "fortran_order and shape)");
      }
      skip_space();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      skip_space();
      if (peek() != '}')
        fail(where_, "expected ',' or '}' at position " + std::to_string(i_) + " of the header");
    }
    for (; i_ < s_.size(); ++i_)
      if (s_[i_] != ' ' && s_[i_] != '\n' && s_[i_] != '\t' && s_[i_] != '\r' && s_[i_] != '\0')
        fail(where_, "unexpected characters after the header's dict");
    if (!seen_descr || !seen_fortran || !seen_shape)
      fail(where_, std::string("the header lacks the key '") +
                       (!seen_descr     ? "descr"
                        : !seen_fortran ? "fortran_order"
                                        : "shape") +
                       "'");
    return h;
  }

private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  void expect(char c) {
    if (peek() != c)
      fail(where_, std::string("expected '") + c + "' at position " + std::to_string(i_) +
                       " of the header");
    ++i_;
  }
  void once(bool &seen, std::string const &key) {
    if (seen)
      fail(where_, "the key '" + key + "' appears twice in the header");
    seen = true;
  }
  std::string string_literal() {
    char const q = peek();
    if (q != '\'' && q != '"')
      fail(where_, "expected a quoted string at position " + std::to_string(i_) + " of the header");
    std::size_t const end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos)
      fail(where_, "unterminated string in the header");
    std::string r(s_.substr(i_ + 1, end - i_ - 1));
    i_ = end + 1;
    return r;
  }
  bool boolean() {
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    fail(where_, "fortran_order is neither True nor False");
  }
  shape tuple() {
    shape r;
    expect('(');
    for (;;) {
      skip_space();
      if (peek() == ')') {
        ++i_;
        break;
      }
      if (peek() < '0' || peek() > '9')
        fail(where_, "the shape is not a tuple of non-negative integers");
      std::uint64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        v = v * 10 + std::uint64_t(peek() - '0');
        if (v > (std::uint64_t(1) << 62))
          fail(where_, "an extent of the shape is too large");
        ++i_;
      }
      if (peek() == 'L') // Python 2's long integers, in old files
        ++i_;
      if (r.rank == max_rank)
        fail(where_, "the shape has more than " + std::to_string(max_rank) +
                         " dimensions, dualcast's maximum rank");
      r.ext[r.rank++] = index_t(v);
      skip_space();
      if (peek() == ',') {
        ++i_;
      } else if (peek() != ')') {
        fail(where_, "expected ',' or ')' in the shape");
      }
    }
    return r;
  }
  void descr(std::string const &d, header &h) {
    if (d.size() == 3 && (d[0] == '<' || d[0] == '>' || d[0] == '=' || d[0] == '|') &&
        d[1] == 'f' && (d[2] == '4' || d[2] == '8')) {
      h.item_size = d[2] - '0';
      bool const big = d[0] == '>';
      h.swap = big != (std::endian::native == std::endian::big);
      return;
    }
    throw dtype_error("dualcast::load_npy: " + where_ + ": dtype '" + d +
                      "' is not supported; dualcast reads float32 ('<f4') and float64 ('<f8') "
                      "arrays (convert with arr.astype(np.float32) in NumPy)");
  }

  std::string_view s_;
  std::string const &where_;
  std::size_t i_ = 0;
};

template <class U> U read_item(char const *p, bool swap) {
  char b[sizeof(U)];
  std::memcpy(b, p, sizeof(U));
  if (swap)
    for (std::size_t i = 0; i < sizeof(U) / 2; ++i)
      std::swap(b[i], b[sizeof(U) - 1 - i]);
  U v;
  std::memcpy(&v, b, sizeof(U));
  return v;
}

template <class T> tensor<T> parse(std::string_view bytes, std::string const &where) {
  if (bytes.size() < magic_size + 4 || bytes.substr(0, magic_size) != std::string_view(magic))
    fail(where, "not a .npy file (no \\x93NUMPY magic string at its start)");
  int const major = static_cast<unsigned char>(bytes[6]),
            minor = static_cast<unsigned char>(bytes[7]);
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    fail(where, "format version " + std::to_string(major) + "." + std::to_string(minor) +
                    " is not supported (1.0, 2.0 and 3.0 are)");
  std::size_t const len_bytes = major == 1 ? 2 : 4;
  std::size_t const start = magic_size + 2 + len_bytes;
  if (bytes.size() < start)
    fail(where, "the file ends inside its preamble");
  std::size_t const header_len = get_le(bytes.data() + 8, int(len_bytes));
  if (header_len > bytes.size() - start)
    fail(where, "the header length " + std::to_string(header_len) + " runs past the end of the " +
                    std::to_string(bytes.size()) + " bytes");
  header const h = header_parser(bytes.substr(start, header_len), where).parse();
  std::size_t const data_at = start + header_len;
  std::size_t const available = bytes.size() - data_at;
  // The element count, checked against the bytes present before anything is allocated. The
  // product of the non-zero extents must fit in index_t even when another extent is 0: the
  // strides are products of the extents (NumPy refuses such shapes too).
  std::uint64_t nonzero = 1;
  bool empty = false;
  for (int i = 0; i < h.dims.rank; ++i) {
    std::uint64_t const e = std::uint64_t(h.dims.ext[i]);
    if (e == 0) {
      empty = true;
      continue;
    }
    if (nonzero > std::uint64_t(std::numeric_limits<index_t>::max()) / e)
      fail(where, "shape " + to_string(h.dims) + " is too large (its extents multiply past 2^63)");
    nonzero *= e;
  }
  std::uint64_t const n = empty ? 0 : nonzero;
  if (n > available / std::uint64_t(h.item_size))
    fail(where, "the data is shorter than shape " + to_string(h.dims) + " needs (" +
                    std::to_string(available) + " bytes for " + std::to_string(n) +
                    " elements of " + std::to_string(h.item_size) + " bytes)");
  // Fortran order: the contiguous tensor of the reversed shape, permuted back.
  shape stored = h.dims;
  if (h.fortran)
    for (int i = 0; i < h.dims.rank; ++i)
      stored.ext[i] = h.dims.ext[h.dims.rank - 1 - i];
  tensor<T> r = tensor<T>::empty(stored);
  T *out = r.raw_data();
  char const *src = bytes.data() + data_at;
  for (std::uint64_t i = 0; i < n; ++i, src += h.item_size)
    out[i] = h.item_size == 4 ? static_cast<T>(read_item<float>(src, h.swap))
                              : static_cast<T>(read_item<double>(src, h.swap));
  if (h.fortran && h.dims.rank > 1) {
    std::vector<int> perm(std::size_t(h.dims.rank));
    for (int i = 0; i < h.dims.rank; ++i)
      perm[std::size_t(i)] = h.dims.rank - 1 - i;
    r = r.permuted(perm);
  }
  return r;
}

inline std::string read_file(std::filesystem::path const &path, char const *op) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw io_error(std::string(op) + ": cannot open '" + path.string() + "' for reading");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad())
    throw io_error(std::string(op) + ": error while reading '" + path.string() + "'");
  return bytes;
}
inline void write_file(std::filesystem::path const &path, std::string const &bytes,
                       char const *op) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    throw io_error(std::string(op) + ": cannot open '" + path.string() + "' for writing");
  out.write(bytes.data(), std::streamsize(bytes.size()));
  out.close();
  if (!out)
    throw io_error(std::string(op) + ": error while writing '" + path.string() + "'");
}

} // namespace detail::npy

// The .npy file of t, in memory (see the file comment).
template <class T> std::string npy_bytes(tensor<T> const &t) {
  t.require_defined("npy_bytes");
  std::string header = std::string("{'descr': '") + (sizeof(T) == 4 ? "<f4" : "<f8") +
                       "', 'fortran_order': False, 'shape': " + to_string(t.dims()) + ", }";
  std::size_t const preamble = detail::npy::magic_size + 2 + 2;
  std::size_t const total = (preamble + header.size() + 1 + 63) / 64 * 64;
  header.append(total - preamble - header.size() - 1, ' ');
  header += '\n';
  std::string out(detail::npy::magic, detail::npy::magic_size);
  out += char(1);
  out += char(0);
  detail::npy::put_u16(out, std::uint32_t(header.size()));
  out += header;
  tensor<T> const c = t.to(device::host()).contiguous();
  std::size_t const at = out.size();
  out.resize(at + c.nbytes());
  if (c.nbytes() > 0)
    std::memcpy(out.data() + at, c.data(), c.nbytes());
  if constexpr (std::endian::native == std::endian::big)
    for (std::size_t i = at; i < out.size(); i += sizeof(T))
      for (std::size_t k = 0; k < sizeof(T) / 2; ++k)
        std::swap(out[i + k], out[i + sizeof(T) - 1 - k]);
  return out;
}

// A tensor from the bytes of a .npy file; `where` names them in errors.
template <class T>
tensor<T> from_npy_bytes(std::string_view bytes, std::string const &where = "npy data") {
  return detail::npy::parse<T>(bytes, where);
}

template <class T> void save_npy(std::filesystem::path const &path, tensor<T> const &t) {
  detail::npy::write_file(path, npy_bytes(t), "dualcast::save_npy");
}

template <class T> tensor<T> load_npy(std::filesystem::path const &path) {
  return from_npy_bytes<T>(detail::npy::read_file(path, "dualcast::load_npy"),
                           "'" + path.string() + "'");
}

} // namespace dualcast
