// The integer dot-product paths shared by int8_gemm.c (int8 weights) and block_quant.c (GGML blocks): which ones
// this build has, and their numbering (cpu_int8.Int8Isa), each usable where the ones above it are not.
#ifndef SPRIG_VNNI_H
#define SPRIG_VNNI_H

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#define HAVE_VNNI512 1
#endif
#if defined(__AVX2__) && (defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__)))
#define HAVE_VNNI256 1
#if defined(__AVXVNNI__)
#define dpbusd256 _mm256_dpbusd_avx_epi32
#else
#define dpbusd256 _mm256_dpbusd_epi32  // AVX512_VNNI + VL: the same instruction, EVEX-encoded
#endif
#endif

enum { ISA_PORTABLE = 0, ISA_AVX2 = 1, ISA_AVX_VNNI = 2, ISA_AVX512_VNNI = 3 };

// The best path this build has.
static inline int vnni_best_isa(void) {
#if defined(HAVE_VNNI512)
    return ISA_AVX512_VNNI;
#elif defined(HAVE_VNNI256)
    return ISA_AVX_VNNI;
#elif defined(__AVX2__)
    return ISA_AVX2;
#else
    return ISA_PORTABLE;
#endif
}
#endif
