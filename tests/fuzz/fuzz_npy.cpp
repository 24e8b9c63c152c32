// libFuzzer target: the .npy and .npz readers (io/npy.hpp, io/npz.hpp) on untrusted bytes. Any
// input must give either a dualcast::io_error / dtype_error or valid arrays; anything else (a
// crash, a sanitizer report, another exception, an allocation over -malloc_limit_mb) fails.
//
//   clang++-14 -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -Iinclude -Ikernels \
//     tests/fuzz/fuzz_npy.cpp -o fuzz_npy && ./fuzz_npy -malloc_limit_mb=64 tests/fuzz/npy_corpus
//
// Input bytes: a mode byte (bit 0: an .npz archive rather than an .npy file; bit 1: read as double
// rather than float), then the file. A valid result is checked: its arrays together hold no more
// elements than the file has room for (4 bytes each: a reader must not allocate beyond its
// input, and overlapping zip entries must not multiply one entry's data), and each array
// survives a round trip through npy_bytes / from_npy_bytes bit for bit.
#include <dualcast/io/npy.hpp>
#include <dualcast/io/npz.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>

namespace {

[[noreturn]] void failure(char const *what) {
  std::fprintf(stderr, "fuzz_npy: %s\n", what);
  std::abort();
}

template <class T> void check_round_trip(dualcast::tensor<T> const &t) {
  dualcast::tensor<T> const c = t.contiguous();
  dualcast::tensor<T> const back = dualcast::from_npy_bytes<T>(dualcast::npy_bytes(t));
  if (!(back.dims() == t.dims()))
    failure("the shape changed in a round trip through npy_bytes");
  if (c.nbytes() != back.nbytes() ||
      (c.nbytes() > 0 && std::memcmp(c.data(), back.data(), c.nbytes()) != 0))
    failure("the values changed in a round trip through npy_bytes");
}

template <class T> void run(std::string_view file, bool npz) {
  std::map<std::string, dualcast::tensor<T>> arrays;
  try {
    if (npz)
      arrays = dualcast::from_npz_bytes<T>(file);
    else
      arrays.emplace("", dualcast::from_npy_bytes<T>(file));
  } catch (dualcast::io_error const &) {
    return;
  } catch (dualcast::dtype_error const &) {
    return;
  }
  std::size_t elements = 0;
  for (auto const &[name, t] : arrays) {
    if (t.size() < 0)
      failure("a negative element count");
    elements += std::size_t(t.size());
    if (elements > file.size() / 4)
      failure("the arrays hold more elements than the file has bytes for");
    check_round_trip(t);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const *data, std::size_t size) {
  if (size == 0)
    return 0;
  std::string_view const file(reinterpret_cast<char const *>(data) + 1, size - 1);
  bool const npz = data[0] & 1;
  if (data[0] & 2)
    run<double>(file, npz);
  else
    run<float>(file, npz);
  return 0;
}
