// bf16 <-> float conversions shared by sprig's C kernels: scalar, and the AVX-512 rounding of 16 floats at once.
#ifndef SPRIG_BF16_H
#define SPRIG_BF16_H
#include <stdint.h>
#include <string.h>

static inline float bf16_to_float(uint16_t x) {
    uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN, as torch writes it
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even, as torch does
    return (uint16_t)(u >> 16);
}

#ifdef __AVX512F__
#include <immintrin.h>

// Round-to-nearest-even bf16 bits of 16 floats (in the low halves of 32-bit lanes); NaN as torch writes it.
static inline __m512i bf16_bits(__m512 f) {
    const __m512i u = _mm512_castps_si512(f);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    return _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0));
}
#endif
#endif
