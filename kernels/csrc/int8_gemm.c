/* int8 linear layers (W8A8) on vector units: out[M, N] = (quantized a)[M, K] . w[N, K]^T, rescaled (+ bias).
 *
 * `--quantization int8` keeps weights as int8 with a scale per output row. torch's _weight_int8pack_mm widens every
 * weight byte to the activation dtype and multiplies in floating point; at decode sizes a linear layer is a read of
 * its weight, and VPDPBUSD multiplies 64 u8 x s8 pairs into 16 int32 sums per instruction, so this kernel also
 * quantizes the activations (per row, at each call) and reads half the bytes of the bf16 kernel (vec_gemm.c).
 *
 * Activations: per row, amax = max |a|, codes c = rint(clamp(a * (127 / amax), -127, 127)) stored as u8 c + 128
 * (VPDPBUSD takes unsigned x signed) and a row scale amax / 127; a row with amax < 1e-30 gets codes 0 and scale 0.
 * The + 128 comes out again through corr[n] = 128 * sum_k w[n][k], computed once when the weight is packed:
 * out[m][n] = float(acc[m][n] - corr[n]) * (xscale[m] * wscale[n]) (+ bias[n]), then bf16 (nearest even) or fp32.
 *
 * Weight layout (`int8_pack` in kernels/cpu_int8.py): K zero-padded to a multiple of 4 and N to whole panels; per
 * panel of 16 output columns, for each group of 4 input features, the 16 columns' 4 bytes side by side -- one
 * 64-byte line, one VPDPBUSD zmm against the row's 4 activation codes broadcast. corr (int32), wscale and bias
 * (fp32) are padded to whole panels too.
 *
 * `isa` picks the code path (the caller passes `int8_gemm_best_isa()` or less, to test the fallbacks here):
 * 3 AVX512_VNNI (zmm), 2 AVX-VNNI (ymm; also built from AVX512_VNNI + VL, the same instruction EVEX-encoded),
 * 1 AVX2 without VNNI (s8 widened to s16, VPMADDWD: VPMADDUBSW would saturate its int16 pair sums), 0 portable C.
 * Every path sums the same integers exactly (|acc| <= 255 * 127 * K fits int32 for K <= 65536) and does the same
 * float operations in the same order (no FMA contraction in this file), so all outputs are bit-identical.
 * Returns 0 when done, else nonzero (bad sizes, or a path this build lacks).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")  /* a*b + c stays two roundings, as in the scalar and torch references */
#endif

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "panels.h"
#include "kernels.h"
#include "vnni.h"

#define MAX_K 65536  /* 255 * 127 * MAX_K < 2^31: the int32 sums cannot wrap */
#define TINY 1e-30f  /* a row this small quantizes to zeros (127 / amax overflows below 4e-37) */

int int8_gemm_best_isa(void) { return vnni_best_isa(); }

/* ---- activation quantization: one row of fp32 (dtype 0) or bf16 (dtype 1) to u8 codes + 128 ---- */
static inline float load_x(const void *row, int dtype, int64_t i) {
    return dtype ? bf16_to_float(((const uint16_t *)row)[i]) : ((const float *)row)[i];
}

static inline uint8_t code(float x, float inv) {
    const float v = fminf(fmaxf(x * inv, -127.0f), 127.0f);
    return (uint8_t)((int32_t)rintf(v) + 128);
}

static float amax_portable(const void *row, int dtype, int64_t k) {
    float m = 0.0f;
    for (int64_t i = 0; i < k; i++) {  /* a compare, not fmaxf: gcc 12 for aarch64 crashes vectorizing that */
        const float a = fabsf(load_x(row, dtype, i));
        if (a > m) m = a;  /* NaN is skipped, as fmaxf skips it */
    }
    return m;
}

static void codes_portable(const void *row, int dtype, int64_t k, float inv, uint8_t *q) {
    for (int64_t i = 0; i < k; i++) q[i] = code(load_x(row, dtype, i), inv);
}

#if defined(HAVE_VNNI512)
static inline __m512 load16(const void *row, int dtype, int64_t i, __mmask16 mask) {
    if (dtype == 0) return _mm512_maskz_loadu_ps(mask, (const float *)row + i);
    const __m256i h = _mm256_maskz_loadu_epi16(mask, (const uint16_t *)row + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __mmask16 tail16(int64_t left) { return left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1); }

static float amax_avx512(const void *row, int dtype, int64_t k) {
    __m512 m = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(load16(row, dtype, i, tail16(k - i))));
    return _mm512_reduce_max_ps(m);
}

static void codes_avx512(const void *row, int dtype, int64_t k, float inv, uint8_t *q) {
    const __m512 vinv = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    const __m512i bias = _mm512_set1_epi32(128);
    for (int64_t i = 0; i < k; i += 16) {
        const __mmask16 mask = tail16(k - i);
        const __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(load16(row, dtype, i, mask), vinv), lo), hi);
        const __m512i c = _mm512_add_epi32(_mm512_cvtps_epi32(v), bias);  /* rounds to nearest even, as rintf */
        _mm512_mask_cvtepi32_storeu_epi8(q + i, mask, c);
    }
}
#endif

#if defined(__AVX2__)
static inline __m256 load8(const void *row, int dtype, int64_t i) {
    if (dtype == 0) return _mm256_loadu_ps((const float *)row + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static float amax_avx2(const void *row, int dtype, int64_t k) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(load8(row, dtype, i), abs_mask));
    float lanes[8], best = 0.0f;
    _mm256_storeu_ps(lanes, m);
    for (int l = 0; l < 8; l++) best = fmaxf(best, lanes[l]);
    for (; i < k; i++) best = fmaxf(best, fabsf(load_x(row, dtype, i)));
    return best;
}

static void codes_avx2(const void *row, int dtype, int64_t k, float inv, uint8_t *q) {
    const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const __m256i bias = _mm256_set1_epi32(128);
    /* the low byte of each int32 lane, gathered into the lane's first 4 bytes */
    const __m256i low_bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                               0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        const __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(load8(row, dtype, i), vinv), lo), hi);
        const __m256i c = _mm256_shuffle_epi8(_mm256_add_epi32(_mm256_cvtps_epi32(v), bias), low_bytes);
        const uint32_t first = (uint32_t)_mm256_extract_epi32(c, 0), second = (uint32_t)_mm256_extract_epi32(c, 4);
        memcpy(q + i, &first, 4);
        memcpy(q + i + 4, &second, 4);
    }
    codes_portable((const char *)row + i * (dtype ? 2 : 4), dtype, k - i, inv, q + i);
}
#endif

typedef float (*AmaxFn)(const void *row, int dtype, int64_t k);
typedef void (*CodesFn)(const void *row, int dtype, int64_t k, float inv, uint8_t *q);

/* Row `a` (k values) → kp codes (the padding is code 0: it meets zero weights); returns the row's scale. */
static float quantize_row(AmaxFn amax_fn, CodesFn codes_fn, const void *a, int dtype, int64_t k, int64_t kp,
                          uint8_t *q) {
    const float amax = amax_fn(a, dtype, k);
    const int zero = !(amax >= TINY);
    codes_fn(a, dtype, k, zero ? 0.0f : 127.0f / amax, q);
    memset(q + k, 128, (size_t)(kp - k));
    return zero ? 0.0f : amax / 127.0f;
}

/* ---- int32 sums of `rows` (<= ROWS) code rows against `np` (<= GROUP) panels: sums [ROWS][GROUP][PANEL] ---- */
static void group_portable(const uint8_t *a, int64_t kp, int rows, const int8_t *w, int np, int32_t *sums) {
    for (int r = 0; r < rows; r++)
        for (int p = 0; p < np; p++) {
            int32_t acc[PANEL] = {0};
            const int8_t *wp = w + p * kp * PANEL;
            for (int64_t j = 0; j < kp / 4; j++) {
                const uint8_t *x = a + r * kp + 4 * j;
                const int8_t *line = wp + j * 4 * PANEL;
                for (int c = 0; c < PANEL; c++)
                    acc[c] += x[0] * line[4 * c] + x[1] * line[4 * c + 1] + x[2] * line[4 * c + 2]
                              + x[3] * line[4 * c + 3];
            }
            memcpy(sums + (r * GROUP + p) * PANEL, acc, sizeof acc);
        }
}

/* The row's 4 codes for input group j, in every 32-bit lane. */
static inline int32_t codes4(const uint8_t *a, int64_t j) {
    int32_t v;
    memcpy(&v, a + 4 * j, 4);
    return v;
}

#if defined(HAVE_VNNI512)
/* The accumulators are VPDPBUSD's own vector type: as __m512i (vectors of int64) each one converts on every
 * instruction, and GCC 12 then copies and spills them (measured 1.5-2x slower at 4-6 rows). */
static inline __attribute__((always_inline)) void group_vnni512(const uint8_t *a, int64_t kp, const int rows,
                                                                const int8_t *w, const int np, int32_t *sums) {
    __v16si acc[ROWS][GROUP];
    for (int r = 0; r < ROWS; r++)
        for (int p = 0; p < GROUP; p++) acc[r][p] = (__v16si)_mm512_setzero_si512();
    const int64_t panel_bytes = kp * PANEL;
    for (int64_t j = 0; j < kp / 4; j++) {
        __m512i line[GROUP];
        for (int p = 0; p < GROUP; p++)
            if (p < np) line[p] = _mm512_loadu_si512(w + p * panel_bytes + j * 4 * PANEL);
        for (int r = 0; r < ROWS; r++) {
            if (r >= rows) break;
            const __m512i x = _mm512_set1_epi32(codes4(a + r * kp, j));
            for (int p = 0; p < GROUP; p++)
                if (p < np) acc[r][p] = (__v16si)_mm512_dpbusd_epi32((__m512i)acc[r][p], x, line[p]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int p = 0; p < np; p++) _mm512_storeu_si512(sums + (r * GROUP + p) * PANEL, (__m512i)acc[r][p]);
}
#endif

#if defined(HAVE_VNNI256)
/* 16 ymm registers: two panels (four 8-column halves) and up to two rows at a time. */
static inline __attribute__((always_inline)) void pair_vnni256(const uint8_t *a, int64_t kp, const int rows,
                                                               const int8_t *w, const int np, int32_t *sums) {
    __v8si acc[2][4];  /* VPDPBUSD's own vector type, as in group_vnni512 */
    for (int r = 0; r < 2; r++)
        for (int h = 0; h < 4; h++) acc[r][h] = (__v8si)_mm256_setzero_si256();
    const int64_t panel_bytes = kp * PANEL;
    for (int64_t j = 0; j < kp / 4; j++) {
        __m256i line[4];
        for (int h = 0; h < 2 * np; h++)
            line[h] = _mm256_loadu_si256((const __m256i *)(w + (h / 2) * panel_bytes + j * 4 * PANEL + (h % 2) * 32));
        for (int r = 0; r < rows; r++) {
            const __m256i x = _mm256_set1_epi32(codes4(a + r * kp, j));
            for (int h = 0; h < 2 * np; h++) acc[r][h] = (__v8si)dpbusd256((__m256i)acc[r][h], x, line[h]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < 2 * np; h++)
            _mm256_storeu_si256((__m256i *)(sums + (r * GROUP + h / 2) * PANEL + (h % 2) * 8), (__m256i)acc[r][h]);
}

static void group_vnni256(const uint8_t *a, int64_t kp, int rows, const int8_t *w, int np, int32_t *sums) {
    for (int p = 0; p < np; p += 2)
        for (int r = 0; r < rows; r += 2) {
            const uint8_t *ar = a + r * kp;
            const int8_t *wp = w + p * kp * PANEL;
            int32_t *sp = sums + (r * GROUP + p) * PANEL;
            const int two_rows = rows - r >= 2, two_panels = np - p >= 2;
            /* constant counts, so the accumulators stay in registers */
            if (two_rows && two_panels) pair_vnni256(ar, kp, 2, wp, 2, sp);
            else if (two_rows) pair_vnni256(ar, kp, 2, wp, 1, sp);
            else if (two_panels) pair_vnni256(ar, kp, 1, wp, 2, sp);
            else pair_vnni256(ar, kp, 1, wp, 1, sp);
        }
}
#endif

#if defined(__AVX2__)
/* One panel, up to two rows: each 16-byte quarter of a line (4 columns x 4 inputs) widens to 16 int16, and
 * VPMADDWD against the row's 4 codes (as int16, repeated) leaves two int32 partial sums per column. */
static inline __attribute__((always_inline)) void panel_avx2(const uint8_t *a, int64_t kp, const int rows,
                                                             const int8_t *w, int32_t *sums) {
    __v8si acc[2][4];  /* VPMADDWD's own vector type, as in group_vnni512 */
    for (int r = 0; r < 2; r++)
        for (int q = 0; q < 4; q++) acc[r][q] = (__v8si)_mm256_setzero_si256();
    for (int64_t j = 0; j < kp / 4; j++) {
        __m256i wide[4];
        for (int q = 0; q < 4; q++)
            wide[q] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + j * 4 * PANEL + q * 16)));
        for (int r = 0; r < rows; r++) {
            const __m256i x = _mm256_broadcastq_epi64(_mm_cvtepu8_epi16(_mm_cvtsi32_si128(codes4(a + r * kp, j))));
            for (int q = 0; q < 4; q++) acc[r][q] += (__v8si)_mm256_madd_epi16(wide[q], x);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int half = 0; half < 2; half++) {
            /* adjacent partial sums: [c0 c1 c4 c5 | c2 c3 c6 c7] of this half, then in column order */
            const __m256i s = _mm256_hadd_epi32((__m256i)acc[r][2 * half], (__m256i)acc[r][2 * half + 1]);
            _mm256_storeu_si256((__m256i *)(sums + r * GROUP * PANEL + half * 8), _mm256_permute4x64_epi64(s, 0xd8));
        }
}

static void group_avx2(const uint8_t *a, int64_t kp, int rows, const int8_t *w, int np, int32_t *sums) {
    for (int p = 0; p < np; p++)
        for (int r = 0; r < rows; r += 2) {
            const uint8_t *ar = a + r * kp;
            int32_t *sp = sums + (r * GROUP + p) * PANEL;
            if (rows - r >= 2) panel_avx2(ar, kp, 2, w + p * kp * PANEL, sp);
            else panel_avx2(ar, kp, 1, w + p * kp * PANEL, sp);
        }
}
#endif

#if defined(HAVE_VNNI512)
static void pass_vnni512(const uint8_t *a, int64_t kp, int rows, const int8_t *w, int np, int32_t *sums) {
    WITH_CONSTANT_ROWS(group_vnni512, a, kp, rows, w, np, sums);
}
#endif

/* ---- epilogue: int32 sums of one row and panel → `cols` outputs ---- */
typedef struct {
    const int32_t *corr;  /* 128 * column sums of the weight codes */
    const float *wscale;  /* per output column */
    const float *bias;    /* fp32, or NULL */
} Columns;

static void store_portable(const int32_t *sums, Columns c, float xs, void *out, int dtype, int cols) {
    for (int i = 0; i < cols; i++) {
        float y = (float)(sums[i] - c.corr[i]) * (xs * c.wscale[i]);
        if (c.bias) y = y + c.bias[i];
        if (dtype) ((uint16_t *)out)[i] = float_to_bf16(y);
        else ((float *)out)[i] = y;
    }
}

#if defined(HAVE_VNNI512)
static void store_avx512(const int32_t *sums, Columns c, float xs, void *out, int dtype, int cols) {
    const __mmask16 mask = tail16(cols);
    const __m512i s = _mm512_sub_epi32(_mm512_loadu_si512(sums), _mm512_loadu_si512(c.corr));
    __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(_mm512_set1_ps(xs), _mm512_loadu_ps(c.wscale)));
    if (c.bias) y = _mm512_add_ps(y, _mm512_loadu_ps(c.bias));
    if (!dtype) {
        _mm512_mask_storeu_ps(out, mask, y);
        return;
    }
    _mm256_mask_storeu_epi16(out, mask, _mm512_cvtepi32_epi16(bf16_bits(y)));  /* float_to_bf16 in 16 lanes */
}
#endif

#if defined(__AVX2__)
static void store_avx2(const int32_t *sums, Columns c, float xs, void *out, int dtype, int cols) {
    if (cols < PANEL) {
        store_portable(sums, c, xs, out, dtype, cols);
        return;
    }
    const __m256i low_halves = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
                                                0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    for (int h = 0; h < PANEL; h += 8) {
        const __m256i s = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)(sums + h)),
                                           _mm256_loadu_si256((const __m256i *)(c.corr + h)));
        __m256 y = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(_mm256_set1_ps(xs), _mm256_loadu_ps(c.wscale + h)));
        if (c.bias) y = _mm256_add_ps(y, _mm256_loadu_ps(c.bias + h));
        if (!dtype) {
            _mm256_storeu_ps((float *)out + h, y);
            continue;
        }
        const __m256i u = _mm256_castps_si256(y);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
        /* NaN: |u| > 0x7f800000 as signed ints (both sides are non-negative) */
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                               _mm256_set1_epi32(0x7f800000));
        r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), nan);
        r = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(r, low_halves), 0x08);  /* 8 uint16 in the low 128 bits */
        _mm_storeu_si128((__m128i *)((uint16_t *)out + h), _mm256_castsi256_si128(r));
    }
}
#endif

/* ---- the code path: one function per step ---- */
typedef struct {
    AmaxFn amax;
    CodesFn codes;
    void (*pass)(const uint8_t *a, int64_t kp, int rows, const int8_t *w, int np, int32_t *sums);
    void (*store)(const int32_t *sums, Columns c, float xs, void *out, int dtype, int cols);
} Path;

static Path path_for(int isa) {
#if defined(HAVE_VNNI512)
    if (isa >= ISA_AVX512_VNNI) return (Path){amax_avx512, codes_avx512, pass_vnni512, store_avx512};
#endif
#if defined(HAVE_VNNI256)
    if (isa >= ISA_AVX_VNNI) return (Path){amax_avx2, codes_avx2, group_vnni256, store_avx2};
#endif
#if defined(__AVX2__)
    if (isa >= ISA_AVX2) return (Path){amax_avx2, codes_avx2, group_avx2, store_avx2};
#endif
    (void)isa;
    return (Path){amax_portable, codes_portable, group_portable, store_portable};
}

/* Rows [r0, r1) of `a` (rows `row_bytes` apart) → their codes and scales. */
static void quantize_rows(Path path, const void *a, int64_t row_bytes, int dtype, int64_t k, int64_t kp, int64_t r0,
                          int64_t r1, uint8_t *codes, float *xscale) {
    for (int64_t r = r0; r < r1; r++)
        xscale[r] = quantize_row(path.amax, path.codes, (const char *)a + r * row_bytes, dtype, k, kp, codes + r * kp);
}

/* One call's operands, shared by the work items. */
typedef struct {
    Path path;
    const uint8_t *codes;  /* [m, kp] activation codes + 128 */
    const float *xscale;   /* [m] */
    const int8_t *w;
    const int32_t *corr;
    const float *wscale, *bias;
    void *out;
    int64_t m, n, kp, panels;
    int out_dtype;
} Job;

/* Work item `g`: every row against panels [4g, 4g + 4), ROWS rows per pass over them. */
static void run_group(const Job *job, int64_t g) {
    int32_t sums[ROWS * GROUP * PANEL] __attribute__((aligned(64)));
    const int64_t p0 = g * GROUP, m = job->m, n = job->n, kp = job->kp;
    const size_t elem = job->out_dtype ? 2 : 4;
    const int np = job->panels - p0 < GROUP ? (int)(job->panels - p0) : GROUP;
    const int8_t *w = job->w + p0 * kp * PANEL;
    for (int64_t r = 0; r < m; r += ROWS) {
        const int rows = m - r < ROWS ? (int)(m - r) : ROWS;
        job->path.pass(job->codes + r * kp, kp, rows, w, np, sums);
        for (int i = 0; i < rows; i++)
            for (int p = 0; p < np; p++) {
                const int64_t col = (p0 + p) * PANEL;
                const Columns c = {job->corr + col, job->wscale + col, job->bias ? job->bias + col : NULL};
                const int cols = n - col < PANEL ? (int)(n - col) : PANEL;
                job->path.store(sums + (i * GROUP + p) * PANEL, c, job->xscale[r + i],
                                (char *)job->out + ((r + i) * n + col) * elem, job->out_dtype, cols);
            }
    }
}

/* out [m, n] (out_dtype 0 fp32, 1 bf16) = a [m, k] (rows `lda` elements apart; dtype 0 fp32, 1 bf16) times the
 * packed weight. */
int int8_linear(const void *a, int64_t lda, const int8_t *w_packed, const int32_t *corr, const float *wscale,
                const float *bias, void *out, int64_t m, int64_t n, int64_t k, int dtype, int out_dtype, int isa,
                int nthreads) {
    if (m <= 0 || n <= 0 || k <= 0 || k > MAX_K || lda < k || (dtype != 0 && dtype != 1)
        || (out_dtype != 0 && out_dtype != 1) || isa < 0 || isa > int8_gemm_best_isa())
        return 1;
    const int64_t kp = (k + 3) & ~(int64_t)3, panels = (n + PANEL - 1) / PANEL, groups = (panels + GROUP - 1) / GROUP;
    const size_t elem = dtype ? 2 : 4, bytes = (size_t)(m * kp) + (size_t)m * sizeof(float);
    uint8_t small[4096] __attribute__((aligned(64)));  /* decode rows: no malloc */
    uint8_t *codes = bytes <= sizeof small ? small : malloc(bytes);
    if (!codes) return 2;
    float *xscale = (float *)(codes + m * kp);  /* m * kp is a multiple of 4 */
    const Path path = path_for(isa);
    /* Parallel regions only where they pay (a region of one thread still costs about a microsecond). */
    if (m < 32) {
        quantize_rows(path, a, lda * elem, dtype, k, kp, 0, m, codes, xscale);
    } else {
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (int64_t r = 0; r < m; r++) quantize_rows(path, a, lda * elem, dtype, k, kp, r, r + 1, codes, xscale);
    }
    const Job job = {path, codes, xscale, w_packed, corr, wscale, bias, out, m, n, kp, panels, out_dtype};
    /* Few groups (a small layer) are not worth waking a second thread for. */
    if (groups < 2 * nthreads) {
        for (int64_t g = 0; g < groups; g++) run_group(&job, g);
    } else {
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (int64_t g = 0; g < groups; g++) run_group(&job, g);
    }
    if (codes != small) free(codes);
    return 0;
}
