// dualcast/io/npz.hpp: several tensors in one NumPy .npz file (a zip archive of .npy files), and
// a parameter list saved and loaded by name.
//
//   dualcast::save_npz("model.npz", std::map<std::string, dualcast::tensor<float>>{{"w", W}, {"b",
//   B}}); auto arrays = dualcast::load_npz<float>("model.npz");    // arrays.at("w")
//   dualcast::save_npz("ckpt.npz", ps);                      // a dualcast::parameters<float>
//   dualcast::load_npz("ckpt.npz", ps);                      // values copied in, by name
//   auto same = dualcast::from_npz_bytes<float>(bytes);      // an .npz file in memory
//   >>> d = np.load("model.npz"); d["w"]                       # in Python
//
// Writing: one stored (uncompressed) zip entry "<name>.npy" per tensor (io/npy.hpp), with its
// CRC-32, local headers and a central directory that Python's zipfile and numpy.load read; the
// file's timestamps are fixed (1980-01-01), so the same tensors give the same bytes. Archives
// that would need ZIP64 (4 GiB or 65535 entries) are refused with io_error.
//
// Reading: the entries of the central directory (ZIP64 sizes and offsets included, as Python
// writes them), each a stored .npy whose CRC-32 is checked; the ".npy" suffix is dropped from the
// names, as numpy.load does. Deflate-compressed entries (np.savez_compressed) are an io_error
// saying so: dualcast has no zlib dependency; write such files with np.savez. Element types
// convert as in load_npy. Every malformed archive is an io_error naming the file and the entry;
// among them entries whose bytes overlap (refused before any array is read: the arrays never hold
// more bytes than the file) and an array name that appears twice.
//
// load_npz(path, ps) copies each array into the value of the parameter of the same name, in
// place (its version is bumped, as for an optimizer step); shapes must match (shape_error). With
// strict (the default), a parameter missing from the file and an array in the file that is not a
// parameter are io_errors, raised before any value is written.
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/io/npy.hpp>
#include <dualcast/nn/parameters.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dualcast {

namespace detail::npz {

// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), as zip stores it.
inline std::uint32_t crc32(std::string_view data) {
  static constexpr std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFu;
  for (char ch : data)
    c = table[(c ^ static_cast<unsigned char>(ch)) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

inline constexpr std::uint32_t local_sig = 0x04034b50, central_sig = 0x02014b50,
                               end_sig = 0x06054b50, zip64_end_sig = 0x06064b50,
                               zip64_locator_sig = 0x07064b50;
inline constexpr std::uint32_t dos_date = (0u << 9) | (1u << 5) | 1u; // 1980-01-01

// name -> .npy bytes, in order, as a zip archive.
inline std::string zip(std::vector<std::pair<std::string, std::string>> const &entries,
                       std::string const &where) {
  using npy::put_u16;
  using npy::put_u32;
  if (entries.size() >= 0xFFFF)
    throw io_error("dualcast::save_npz: " + where + ": " + std::to_string(entries.size()) +
                   " arrays need ZIP64, which dualcast does not write");
  std::string out, central;
  for (auto const &[name, data] : entries) {
    std::uint64_t const offset = out.size();
    if (data.size() >= 0xFFFFFFFFu || offset >= 0xFFFFFFFFu || name.size() >= 0xFFFF)
      throw io_error("dualcast::save_npz: " + where +
                     ": the archive needs ZIP64 (4 GiB or more),"
                     " which dualcast does not write");
    std::uint32_t const crc = crc32(data), size = std::uint32_t(data.size());
    bool utf8 = false;
    for (char c : name)
      utf8 = utf8 || static_cast<unsigned char>(c) >= 0x80;
    std::uint32_t const flags = utf8 ? 0x0800 : 0; // bit 11: the name is UTF-8
    // local file header
    put_u32(out, local_sig);
    put_u16(out, 20); // version needed to extract: 2.0
    put_u16(out, flags);
    put_u16(out, 0); // stored
    put_u16(out, 0); // time
    put_u16(out, dos_date);
    put_u32(out, crc);
    put_u32(out, size);
    put_u32(out, size);
    put_u16(out, std::uint32_t(name.size()));
    put_u16(out, 0); // extra field length
    out += name;
    out += data;
    // central directory header
    put_u32(central, central_sig);
    put_u16(central, 20); // version made by: 2.0, MS-DOS attributes
    put_u16(central, 20);
    put_u16(central, flags);
    put_u16(central, 0);
    put_u16(central, 0);
    put_u16(central, dos_date);
    put_u32(central, crc);
    put_u32(central, size);
    put_u32(central, size);
    put_u16(central, std::uint32_t(name.size()));
    put_u16(central, 0); // extra
    put_u16(central, 0); // comment
    put_u16(central, 0); // disk number start
    put_u16(central, 0); // internal attributes
    put_u32(central, 0); // external attributes
    put_u32(central, std::uint32_t(offset));
    central += name;
  }
  std::uint64_t const cd_offset = out.size();
  if (cd_offset + central.size() >= 0xFFFFFFFFu)
    throw io_error("dualcast::save_npz: " + where +
                   ": the archive needs ZIP64 (4 GiB or more),"
                   " which dualcast does not write");
  out += central;
  put_u32(out, end_sig);
  put_u16(out, 0);
  put_u16(out, 0);
  put_u16(out, std::uint32_t(entries.size()));
  put_u16(out, std::uint32_t(entries.size()));
  put_u32(out, std::uint32_t(central.size()));
  put_u32(out, std::uint32_t(cd_offset));
  put_u16(out, 0); // comment length
  return out;
}

// Bounds-checked little-endian reads from an archive in memory.
class reader {
public:
  reader(std::string_view bytes, std::string where) : b_(bytes), where_(std::move(where)) {}
  [[noreturn]] void fail(std::string const &what) const {
    throw io_error("dualcast::load_npz: " + where_ + ": " + what);
  }
  std::uint64_t get(std::uint64_t at, int bytes) const {
    if (at > b_.size() || std::uint64_t(bytes) > b_.size() - at)
      fail("truncated or corrupt zip archive (a field at byte " + std::to_string(at) +
           " lies past its end)");
    std::uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i)
      v = (v << 8) |
          std::uint64_t(static_cast<unsigned char>(b_[std::size_t(at) + std::size_t(i)]));
    return v;
  }
  std::string_view span(std::uint64_t at, std::uint64_t n) const {
    if (at > b_.size() || n > b_.size() - at)
      fail("truncated or corrupt zip archive (" + std::to_string(n) + " bytes at byte " +
           std::to_string(at) + " lie past its end)");
    return b_.substr(std::size_t(at), std::size_t(n));
  }
  std::size_t size() const { return b_.size(); }
  std::string const &where() const { return where_; }

private:
  std::string_view b_;
  std::string where_;
};

struct entry {
  std::string name;
  std::string_view data;
};

// The stored entries of a zip archive, CRC-checked. No two entries may share bytes: entries that
// overlap (a "zip bomb" of central directory records pointing at the same data) would make the
// arrays read from them larger than the file, and their CRCs quadratic in its size.
inline std::vector<entry> unzip(std::string_view bytes, std::string const &where) {
  reader r(bytes, where);
  if (bytes.size() < 22)
    r.fail("not a zip archive (.npz): too short");
  // The end of central directory record: the last one, before a comment of up to 65535 bytes.
  std::uint64_t eocd = bytes.size() - 22;
  for (;;) {
    if (r.get(eocd, 4) == end_sig && eocd + 22 + r.get(eocd + 20, 2) == bytes.size())
      break;
    if (eocd == 0 || bytes.size() - eocd > 22 + 0xFFFF)
      r.fail("not a zip archive (.npz): no end of central directory record");
    --eocd;
  }
  std::uint64_t count = r.get(eocd + 10, 2), cd_size = r.get(eocd + 12, 4),
                cd_offset = r.get(eocd + 16, 4);
  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    if (eocd < 20 || r.get(eocd - 20, 4) != zip64_locator_sig)
      r.fail("ZIP64 sizes without a ZIP64 end of central directory locator");
    std::uint64_t const z = r.get(eocd - 20 + 8, 8);
    if (r.get(z, 4) != zip64_end_sig)
      r.fail("no ZIP64 end of central directory record where its locator points");
    count = r.get(z + 32, 8);
    cd_size = r.get(z + 40, 8);
    cd_offset = r.get(z + 48, 8);
  }
  if (cd_offset > bytes.size() || cd_size > bytes.size() - cd_offset)
    r.fail("the central directory lies past the end of the file");
  if (count > cd_size / 46)
    r.fail("the central directory is too small for its " + std::to_string(count) + " entries");
  struct located {
    std::string name;
    std::uint64_t crc, start, data_at, size; // the local header at start, the data at data_at
  };
  std::vector<located> found;
  std::uint64_t at = cd_offset;
  for (std::uint64_t k = 0; k < count; ++k) {
    if (r.get(at, 4) != central_sig)
      r.fail("corrupt central directory (entry " + std::to_string(k) + ")");
    std::uint64_t const flags = r.get(at + 8, 2), method = r.get(at + 10, 2);
    std::uint64_t const crc = r.get(at + 16, 4);
    std::uint64_t csize = r.get(at + 20, 4), usize = r.get(at + 24, 4);
    std::uint64_t const name_len = r.get(at + 28, 2), extra_len = r.get(at + 30, 2),
                        comment_len = r.get(at + 32, 2);
    std::uint64_t offset = r.get(at + 42, 4);
    std::string name(r.span(at + 46, name_len));
    // ZIP64 extended information: the 64-bit values of the fields that read 0xFFFFFFFF.
    std::uint64_t e = at + 46 + name_len, extra_end = e + extra_len;
    while (e + 4 <= extra_end) {
      std::uint64_t const id = r.get(e, 2), len = r.get(e + 2, 2);
      if (id == 1) {
        std::uint64_t f = e + 4;
        for (std::uint64_t *field : {&usize, &csize, &offset})
          if (*field == 0xFFFFFFFF) {
            if (f + 8 > e + 4 + len)
              r.fail("entry '" + name + "': a ZIP64 extra field too short");
            *field = r.get(f, 8);
            f += 8;
          }
      }
      e += 4 + len;
    }
    at = extra_end + comment_len;
    if (flags & 1)
      r.fail("entry '" + name + "' is encrypted");
    if (method == 8)
      r.fail("entry '" + name +
             "' is deflate-compressed (np.savez_compressed); dualcast reads "
             "stored (uncompressed) archives only: save it with np.savez");
    if (method != 0)
      r.fail("entry '" + name + "' uses compression method " + std::to_string(method) +
             "; dualcast reads stored (uncompressed) archives only");
    if (csize != usize)
      r.fail("entry '" + name + "' is stored but its compressed and uncompressed sizes differ");
    if (r.get(offset, 4) != local_sig)
      r.fail("entry '" + name + "': no local file header at byte " + std::to_string(offset));
    std::uint64_t const data_at = offset + 30 + r.get(offset + 26, 2) + r.get(offset + 28, 2);
    r.span(data_at, usize); // within the file
    found.push_back({std::move(name), crc, offset, data_at, usize});
  }
  std::vector<located const *> by_start;
  for (auto const &f : found)
    by_start.push_back(&f);
  std::stable_sort(by_start.begin(), by_start.end(),
                   [](located const *a, located const *b) { return a->start < b->start; });
  for (std::size_t i = 1; i < by_start.size(); ++i)
    if (by_start[i]->start < by_start[i - 1]->data_at + by_start[i - 1]->size)
      r.fail("entries '" + by_start[i - 1]->name + "' and '" + by_start[i]->name +
             "' overlap (a corrupt archive, or a zip bomb)");
  std::vector<entry> out;
  for (auto &f : found) {
    std::string_view const data = r.span(f.data_at, f.size);
    if (crc32(data) != f.crc)
      r.fail("entry '" + f.name + "': CRC-32 mismatch (the archive is corrupt)");
    if (!f.name.empty() && f.name.back() == '/')
      continue; // a directory
    out.push_back({std::move(f.name), data});
  }
  return out;
}

inline std::string array_name(std::string const &entry_name) {
  std::string_view const suffix = ".npy";
  if (entry_name.size() >= suffix.size() &&
      std::string_view(entry_name).substr(entry_name.size() - suffix.size()) == suffix)
    return entry_name.substr(0, entry_name.size() - suffix.size());
  return entry_name;
}

// An .npz holding two arrays of one name (a map cannot hold both: refused, not overwritten).
[[noreturn]] inline void repeated_name(std::string const &where, std::string const &name) {
  throw io_error("dualcast::load_npz: " + where + ": the array '" + name + "' appears twice");
}

} // namespace detail::npz

// Every array of the bytes of an .npz file by name (".npy" dropped), converted to T; `where` names
// them in errors.
template <class T>
std::map<std::string, tensor<T>> from_npz_bytes(std::string_view bytes,
                                                std::string const &where = "npz data") {
  std::map<std::string, tensor<T>> r;
  for (auto const &e : detail::npz::unzip(bytes, where)) {
    std::string name = detail::npz::array_name(e.name);
    if (r.contains(name)) // before its array is read
      detail::npz::repeated_name(where, name);
    tensor<T> t = from_npy_bytes<T>(e.data, where + " entry '" + e.name + "'");
    r.emplace(std::move(name), std::move(t));
  }
  return r;
}

// Saves the tensors under their names (entries "<name>.npy"; see the file comment).
template <class T>
void save_npz(std::filesystem::path const &path, std::map<std::string, tensor<T>> const &arrays) {
  std::vector<std::pair<std::string, std::string>> entries;
  for (auto const &[name, t] : arrays)
    entries.emplace_back(name + ".npy", npy_bytes(t));
  detail::npy::write_file(path, detail::npz::zip(entries, "'" + path.string() + "'"),
                          "dualcast::save_npz");
}

// Every array of an .npz file by name (".npy" dropped), converted to T.
template <class T> std::map<std::string, tensor<T>> load_npz(std::filesystem::path const &path) {
  return from_npz_bytes<T>(detail::npy::read_file(path, "dualcast::load_npz"),
                           "'" + path.string() + "'");
}

// The values of a parameter list, by name, in the list's order.
template <class T> void save_npz(std::filesystem::path const &path, parameters<T> const &ps) {
  std::vector<std::pair<std::string, std::string>> entries;
  for (auto const &p : ps)
    entries.emplace_back(p.name + ".npy", npy_bytes(p.v.value()));
  detail::npy::write_file(path, detail::npz::zip(entries, "'" + path.string() + "'"),
                          "dualcast::save_npz");
}

// Copies the arrays of an .npz file into the parameters of the same names (see the file comment).
template <class T>
void load_npz(std::filesystem::path const &path, parameters<T> const &ps, bool strict = true) {
  std::string const where = "dualcast::load_npz: '" + path.string() + "'";
  std::map<std::string, tensor<T>> const arrays = load_npz<T>(path);
  // Every check before the first write.
  for (auto const &p : ps) {
    auto it = arrays.find(p.name);
    if (it == arrays.end()) {
      if (strict)
        throw io_error(where + ": no array named '" + p.name + "' for the parameter of that name");
      continue;
    }
    if (!(it->second.dims() == p.v.dims()))
      throw shape_error(where + ": the array '" + p.name + "' has shape " +
                        to_string(it->second.dims()) + " but the parameter has shape " +
                        to_string(p.v.dims()));
  }
  if (strict)
    for (auto const &a : arrays)
      if (!ps.contains(a.first)) {
        std::string msg = where;
        msg.append(": the array '").append(a.first).append("' is not a parameter of the list");
        throw io_error(msg);
      }
  for (auto const &p : ps)
    if (auto it = arrays.find(p.name); it != arrays.end())
      p.v.value().copy_(it->second);
}

} // namespace dualcast
