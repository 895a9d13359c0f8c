// Row-wise argmax of logits (greedy sampling), fp32 or bf16, OpenMP over rows.
//
// torch's CPU argmax runs at ~1 G elements/s here (9 ms for a batch of 256 over a 32k vocabulary, 19 ms in bf16);
// this reads each row at memory speed: one vector pass for the maximum, a second (the row is in L2) for its first
// index. Semantics as torch: ties go to the lowest index, and a row with a NaN returns its first NaN.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bf16.h"

static inline float value_at(const void *row, int64_t i, int dtype) {
    return dtype == 0 ? ((const float *)row)[i] : bf16_to_float(((const uint16_t *)row)[i]);
}

// The first index of a NaN, or of the maximum (scalar: rows without AVX-512, and NaN rows).
static int64_t argmax_scalar(const void *row, int64_t n, int dtype) {
    int64_t best = 0;
    float top = value_at(row, 0, dtype);
    if (isnan(top)) return 0;
    for (int64_t i = 1; i < n; i++) {
        const float v = value_at(row, i, dtype);
        if (isnan(v)) return i;
        if (v > top) top = v, best = i;
    }
    return best;
}

#ifdef __AVX512F__
#include <immintrin.h>

static inline __m512 load16(const void *row, int64_t i, int dtype, __mmask16 m) {
    if (dtype == 0) return _mm512_maskz_loadu_ps(m, (const float *)row + i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static int64_t argmax_row(const void *row, int64_t n, int dtype) {
    __m512 top = _mm512_set1_ps(-INFINITY);
    __mmask16 nan = 0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = load16(row, i, dtype, 0xFFFF);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        top = _mm512_max_ps(top, v);
    }
    const __mmask16 tail = (__mmask16)((1u << (n - i)) - 1);
    if (tail) {
        const __m512 v = load16(row, i, dtype, tail);
        nan |= _mm512_mask_cmp_ps_mask(tail, v, v, _CMP_UNORD_Q);
        top = _mm512_mask_max_ps(top, tail, top, v);
    }
    if (nan) return argmax_scalar(row, n, dtype);
    const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(top));
    for (i = 0; i < n; i += 16) {
        const __mmask16 live = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __mmask16 hit = _mm512_mask_cmp_ps_mask(live, load16(row, i, dtype, live), m, _CMP_EQ_OQ);
        if (hit) return i + __builtin_ctz(hit);
    }
    return 0;  // unreachable: the maximum is in the row
}
#else
static int64_t argmax_row(const void *row, int64_t n, int dtype) { return argmax_scalar(row, n, dtype); }
#endif

// out[r] = argmax of row r of x [rows, n] (row stride `stride` elements); dtype 0 fp32, 1 bf16. Returns 0, or 1
// for a dtype it does not take.
int argmax_rows(const void *x, int64_t rows, int64_t n, int64_t stride, int dtype, int64_t *out, int num_threads) {
    if ((dtype != 0 && dtype != 1) || n <= 0) return 1;
    const size_t esize = dtype == 0 ? 4 : 2;
#pragma omp parallel for schedule(static) num_threads(rows >= num_threads ? num_threads : 1)
    for (int64_t r = 0; r < rows; r++) out[r] = argmax_row((const char *)x + (size_t)(r * stride) * esize, n, dtype);
    return 0;
}
