// dualcast/backend/cpu/convert.hpp: rows of float, bfloat16 or half elements widened into float
// and float rows rounded back, for the CPU backend's passes over 16-bit arrays
// (backend/cpu/map.hpp). Contiguous rows use the CPU's vector instructions where the target has
// them (AVX2 for bfloat16, with AVX-512 BF16's conversion instruction where present; F16C for
// half); everything else, and every other target, the portable conversions of
// numbers/float16.hpp, which the vector paths match bit for bit (round to nearest even, NaN kept
// and made quiet, subnormals rounded).
#pragma once

#include <dualcast/arrays/stored_view.hpp>
#include <dualcast/core/config.hpp>
#include <dualcast/numbers/float16.hpp>

#include <cstdint>
#include <cstring>

#if defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

namespace dualcast::detail::cpu_backend {

// One element of element_storage s at p, widened.
inline float widen_one(element_storage s, void const *p) {
  std::uint16_t b;
  switch (s) {
  case element_storage::bfloat16:
    std::memcpy(&b, p, 2);
    return float_of_bfloat16(b);
  case element_storage::half:
    std::memcpy(&b, p, 2);
    return float_of_half(b);
  default:
    return *static_cast<float const *>(p);
  }
}
// x rounded into element_storage s at p.
inline void narrow_one(element_storage s, float x, void *p) {
  std::uint16_t b;
  switch (s) {
  case element_storage::bfloat16:
    b = bfloat16_bits_of(x);
    std::memcpy(p, &b, 2);
    return;
  case element_storage::half:
    b = half_bits_of(x);
    std::memcpy(p, &b, 2);
    return;
  default:
    *static_cast<float *>(p) = x;
  }
}

#if defined(__AVX2__)
// Eight bfloat16 elements widened (a 16-bit shift), and eight floats rounded to bfloat16 as
// bfloat16_bits_of does: add 0x7fff plus the kept part's lowest bit (ties to even), keep the upper
// half; NaN: the quiet bit set instead. (Also the CPU passes' in-register conversion,
// backend/cpu/map.hpp.)
inline __m256 float_of_bfloat16_8(__m128i b) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
}
inline __m128i bfloat16_bits_of_8_integer(__m256 x) {
  __m256i const u = _mm256_castps_si256(x);
  __m256i const lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i const rounded = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  __m256i const nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  __m256i const r = _mm256_srli_epi32(
      _mm256_blendv_epi8(rounded, _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), nan), 16);
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
#if defined(__AVX512BF16__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
// AVX-512 BF16's vcvtneps2bf16 rounds exactly as bfloat16_bits_of does (nearest even; a NaN keeps
// its upper half with the quiet bit set; infinities and overflow alike) but flushes subnormal
// floats to zero: a batch holding one (fpclass 0x20, rare) takes the integer rounding instead.
// One instruction for about ten: bfloat16 outputs cost what half's vcvtps2ph costs.
#define DUALCAST_HAS_BF16_CONVERT 1
inline constexpr int fpclass_subnormal = 0x20;
inline __m128i bfloat16_bits_of_8(__m256 x) {
  if (_mm256_fpclass_ps_mask(x, fpclass_subnormal)) [[unlikely]]
    return bfloat16_bits_of_8_integer(x);
  return __builtin_bit_cast(__m128i, _mm256_cvtneps_pbh(x));
}
// Sixteen floats rounded to bfloat16; false (nothing written) where one of them is subnormal.
inline bool bfloat16_bits_of_16(__m512 x, __m256i &bits) {
  if (_mm512_fpclass_ps_mask(x, fpclass_subnormal)) [[unlikely]]
    return false;
  bits = __builtin_bit_cast(__m256i, _mm512_cvtneps_pbh(x));
  return true;
}
#else
inline __m128i bfloat16_bits_of_8(__m256 x) { return bfloat16_bits_of_8_integer(x); }
#endif
#endif

// m contiguous 16-bit elements at src into dst.
inline void widen_contiguous(element_storage s, std::uint16_t const *src, float *dst, index_t m) {
  index_t j = 0;
#if defined(__AVX2__)
  if (s == element_storage::bfloat16)
    for (; j + 8 <= m; j += 8)
      _mm256_storeu_ps(dst + j, float_of_bfloat16_8(
                                    _mm_loadu_si128(reinterpret_cast<__m128i const *>(src + j))));
#endif
#if defined(__F16C__)
  if (s == element_storage::half)
    for (; j + 8 <= m; j += 8)
      _mm256_storeu_ps(
          dst + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<__m128i const *>(src + j))));
#endif
  for (; j < m; ++j)
    dst[j] = s == element_storage::bfloat16 ? float_of_bfloat16(src[j]) : float_of_half(src[j]);
}
// m floats rounded into m contiguous 16-bit elements.
inline void narrow_contiguous(element_storage s, float const *src, std::uint16_t *dst, index_t m) {
  index_t j = 0;
#if defined(DUALCAST_HAS_BF16_CONVERT)
  // (until a batch holding a subnormal: the rest by the 8-lane loop, which rounds those)
  if (s == element_storage::bfloat16)
    for (__m256i bits; j + 16 <= m && bfloat16_bits_of_16(_mm512_loadu_ps(src + j), bits); j += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + j), bits);
#endif
#if defined(__AVX2__)
  if (s == element_storage::bfloat16)
    for (; j + 8 <= m; j += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + j),
                       bfloat16_bits_of_8(_mm256_loadu_ps(src + j)));
#endif
#if defined(__F16C__)
  if (s == element_storage::half)
    for (; j + 8 <= m; j += 8)
      _mm_storeu_si128(
          reinterpret_cast<__m128i *>(dst + j),
          _mm256_cvtps_ph(_mm256_loadu_ps(src + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; j < m; ++j)
    dst[j] = s == element_storage::bfloat16 ? bfloat16_bits_of(src[j]) : half_bits_of(src[j]);
}

// Elements [0, m) of a row (element_storage s, `stride` elements apart, from p) widened into dst,
// padded to mp elements with the last one (whole batches; the padding is computed and never
// stored).
inline void load_row(element_storage s, void const *p, index_t stride, float *dst, index_t m,
                     index_t mp) {
  if (stride == 1 && s != element_storage::native)
    widen_contiguous(s, static_cast<std::uint16_t const *>(p), dst, m);
  else if (stride == 1)
    std::memcpy(dst, p, std::size_t(m) * sizeof(float));
  else {
    auto const *b = static_cast<char const *>(p);
    index_t const step = stride * storage_bytes(s, int(sizeof(float)));
    for (index_t j = 0; j < m; ++j)
      dst[j] = widen_one(s, b + j * step);
  }
  for (index_t j = m; j < mp; ++j)
    dst[j] = dst[m - 1];
}

// m results stored into a row (element_storage s, `stride` apart, from p), each rounded once; with
// add, added to what the row holds, in float, and then rounded. `scratch`: m floats.
inline void store_row(element_storage s, void *p, index_t stride, float const *src, index_t m,
                      bool add, float *scratch) {
  if (add) {
    load_row(s, p, stride, scratch, m, m);
    for (index_t j = 0; j < m; ++j)
      scratch[j] += src[j];
    src = scratch;
  }
  if (stride == 1 && s != element_storage::native)
    narrow_contiguous(s, src, static_cast<std::uint16_t *>(p), m);
  else if (stride == 1)
    std::memcpy(p, src, std::size_t(m) * sizeof(float));
  else {
    auto *b = static_cast<char *>(p);
    index_t const step = stride * storage_bytes(s, int(sizeof(float)));
    for (index_t j = 0; j < m; ++j)
      narrow_one(s, src[j], b + j * step);
  }
}

} // namespace dualcast::detail::cpu_backend
