/* bf16 linear layers on vector units for few rows (decode): out[M, N] = a[M, K] . w[N, K]^T (+ bias).
 *
 * At decode sizes a linear layer is a read of its weight: each weight value meets only M activation rows. oneDNN's
 * packed bf16 matmul reads llama-100m's layer weights at 44-77 GB/s from cache and its LM head at 25 GB/s from
 * DRAM with two threads on an AMD EPYC without AMX; this kernel streams the same packed weight with no per-call
 * set-up and no horizontal sums, so a decode step costs about what reading its weights costs.
 *
 * Weight layout (`vnni_pack` in kernels/cpu_gemm.py, the same bytes as the AMX layout): per block of 16 output
 * columns (a panel; the last one padded with zero rows when N is not a multiple of 16), for each pair of input
 * features (2j, 2j + 1), the 16 columns' pairs side by side -- 32 bf16, one 64-byte line. One line times a broadcast activation pair is one VDPBF16PS; without AVX512_BF16 the line's
 * even and odd halves widen to fp32 by a shift and a mask, so AVX-512F and AVX2 read the same layout.
 *
 * `isa` picks the code path (the caller passes `vec_gemm_best_isa()` or less, to test the fallbacks here):
 * 3 AVX512_BF16, 2 AVX-512F, 1 AVX2 + FMA, 0 portable C (any CPU, NEON/SVE through the compiler).
 * Accumulation is fp32; `out_dtype` 1 rounds the outputs to bf16 (nearest even), 0 stores them as fp32 (the LM
 * head: a bf16 logit's spacing near 32 is 0.25, coarser than the margin between a real model's top two tokens).
 * Returns 0 when done, else nonzero.
 */
#include <stdint.h>
#include <string.h>

#include "bf16.h"
#include "panels.h"
#include "kernels.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

int vec_gemm_best_isa(void) {
#if defined(__AVX512BF16__) && defined(__AVX512F__) && defined(__AVX512BW__)
    return 3;
#elif defined(__AVX512F__) && defined(__AVX512BW__)
    return 2;
#elif defined(__AVX2__) && defined(__FMA__)
    return 1;
#else
    return 0;
#endif
}

/* Round a panel's first `cols` fp32 sums (+ bias) to bf16 (nearest even, NaN as torch writes it) and store them:
 * all 16 but in the last panel of an output size that is not a multiple of 16. */
static inline void store_panel_bf16(uint16_t *dst, const float *sums, const uint16_t *bias, int cols) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
    if (cols == PANEL) {
        __m512 f = _mm512_loadu_ps(sums);
        if (bias)
            f = _mm512_add_ps(f, _mm512_castsi512_ps(_mm512_slli_epi32(
                                     _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)bias)), 16)));
        _mm256_storeu_si256((__m256i *)dst, _mm512_cvtepi32_epi16(bf16_bits(f)));
        return;
    }
#endif
    for (int i = 0; i < cols; i++)
        dst[i] = float_to_bf16(sums[i] + (bias ? bf16_to_float(bias[i]) : 0.0f));
}

/* The same panel stored as fp32, unrounded. */
static inline void store_panel_f32(float *dst, const float *sums, const uint16_t *bias, int cols) {
    for (int i = 0; i < cols; i++) dst[i] = sums[i] + (bias ? bf16_to_float(bias[i]) : 0.0f);
}

/* ---- portable C: the reference the vector paths are tested against, and the path on other CPUs ---- */
static void group_portable(const uint16_t *a, int64_t k, int rows, const uint16_t *w, int np, float *sums) {
    const int64_t panel_elems = k * PANEL;
    for (int r = 0; r < rows; r++)
        for (int p = 0; p < np; p++) {
            float acc[PANEL] = {0};
            const uint16_t *wp = w + p * panel_elems;
            for (int64_t j = 0; j < k / 2; j++) {
                const float x0 = bf16_to_float(a[r * k + 2 * j]), x1 = bf16_to_float(a[r * k + 2 * j + 1]);
                const uint16_t *line = wp + j * 2 * PANEL;
                for (int c = 0; c < PANEL; c++)
                    acc[c] += bf16_to_float(line[2 * c]) * x0 + bf16_to_float(line[2 * c + 1]) * x1;
            }
            memcpy(sums + (r * GROUP + p) * PANEL, acc, sizeof acc);
        }
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
/* The activation pair (a[2j], a[2j + 1]) in every 32-bit lane. */
static inline __m512i pair512(const uint16_t *a, int64_t j) {
    uint32_t v;
    memcpy(&v, a + 2 * j, 4);
    return _mm512_set1_epi32((int)v);
}

#if defined(__AVX512BF16__)
static inline __attribute__((always_inline)) void group_bf16(const uint16_t *a, int64_t k, const int rows,
                                                             const uint16_t *w, const int np, float *sums) {
    __m512 acc[ROWS][GROUP];
    for (int r = 0; r < ROWS; r++)
        for (int p = 0; p < GROUP; p++) acc[r][p] = _mm512_setzero_ps();
    const int64_t panel_elems = k * PANEL;
    for (int64_t j = 0; j < k / 2; j++) {
        __m512bh line[GROUP];
        for (int p = 0; p < GROUP; p++)
            if (p < np) line[p] = (__m512bh)_mm512_loadu_si512(w + p * panel_elems + j * 2 * PANEL);
        for (int r = 0; r < ROWS; r++) {
            if (r >= rows) break;
            const __m512bh x = (__m512bh)pair512(a + r * k, j);
            for (int p = 0; p < GROUP; p++)
                if (p < np) acc[r][p] = _mm512_dpbf16_ps(acc[r][p], line[p], x);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int p = 0; p < np; p++) _mm512_storeu_ps(sums + (r * GROUP + p) * PANEL, acc[r][p]);
}
#endif

static inline __attribute__((always_inline)) void group_avx512(const uint16_t *a, int64_t k, const int rows,
                                                               const uint16_t *w, const int np, float *sums) {
    __m512 acc[ROWS][GROUP];
    for (int r = 0; r < ROWS; r++)
        for (int p = 0; p < GROUP; p++) acc[r][p] = _mm512_setzero_ps();
    const int64_t panel_elems = k * PANEL;
    const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
    for (int64_t j = 0; j < k / 2; j++) {
        __m512 even[GROUP], odd[GROUP];
        for (int p = 0; p < GROUP; p++)
            if (p < np) {
                const __m512i line = _mm512_loadu_si512(w + p * panel_elems + j * 2 * PANEL);
                even[p] = _mm512_castsi512_ps(_mm512_slli_epi32(line, 16));
                odd[p] = _mm512_castsi512_ps(_mm512_and_si512(line, high));
            }
        for (int r = 0; r < ROWS; r++) {
            if (r >= rows) break;
            const __m512 x0 = _mm512_set1_ps(bf16_to_float(a[r * k + 2 * j]));
            const __m512 x1 = _mm512_set1_ps(bf16_to_float(a[r * k + 2 * j + 1]));
            for (int p = 0; p < GROUP; p++)
                if (p < np) acc[r][p] = _mm512_fmadd_ps(odd[p], x1, _mm512_fmadd_ps(even[p], x0, acc[r][p]));
        }
    }
    for (int r = 0; r < rows; r++)
        for (int p = 0; p < np; p++) _mm512_storeu_ps(sums + (r * GROUP + p) * PANEL, acc[r][p]);
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
/* AVX2 has 16 registers: one panel (two 8-column halves) and up to three rows at a time. */
static inline __attribute__((always_inline)) void panel_avx2(const uint16_t *a, int64_t k, const int rows,
                                                             const uint16_t *w, float *sums, int p) {
    __m256 acc[ROWS][2];
    for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const __m256i high = _mm256_set1_epi32((int)0xffff0000u);
    for (int64_t j = 0; j < k / 2; j++) {
        __m256 even[2], odd[2];
        for (int h = 0; h < 2; h++) {
            const __m256i line = _mm256_loadu_si256((const __m256i *)(w + j * 2 * PANEL + h * PANEL));
            even[h] = _mm256_castsi256_ps(_mm256_slli_epi32(line, 16));
            odd[h] = _mm256_castsi256_ps(_mm256_and_si256(line, high));
        }
        for (int r = 0; r < ROWS; r++) {
            if (r >= rows) break;
            const __m256 x0 = _mm256_set1_ps(bf16_to_float(a[r * k + 2 * j]));
            const __m256 x1 = _mm256_set1_ps(bf16_to_float(a[r * k + 2 * j + 1]));
            for (int h = 0; h < 2; h++)
                acc[r][h] = _mm256_fmadd_ps(odd[h], x1, _mm256_fmadd_ps(even[h], x0, acc[r][h]));
        }
    }
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < 2; h++) _mm256_storeu_ps(sums + (r * GROUP + p) * PANEL + h * 8, acc[r][h]);
}

static void group_avx2(const uint16_t *a, int64_t k, int rows, const uint16_t *w, int np, float *sums) {
    for (int p = 0; p < np; p++)
        for (int r = 0; r < rows; r += 3) {  /* three rows: 6 accumulators + 4 widened halves + 2 broadcasts */
            const uint16_t *ar = a + r * k;
            float *sr = sums + r * GROUP * PANEL;
            switch (rows - r) {  /* constant row counts, so the accumulators stay in registers */
                case 1: panel_avx2(ar, k, 1, w + p * k * PANEL, sr, p); break;
                case 2: panel_avx2(ar, k, 2, w + p * k * PANEL, sr, p); break;
                default: panel_avx2(ar, k, 3, w + p * k * PANEL, sr, p); break;
            }
        }
}
#endif

/* One pass: `rows` (<= ROWS) activation rows against `np` (<= GROUP) panels, fp32 sums [ROWS][GROUP][PANEL]. */
static void group_pass(int isa, const uint16_t *a, int64_t k, int rows, const uint16_t *w, int np, float *sums) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
#if defined(__AVX512BF16__)
    if (isa >= 3) WITH_CONSTANT_ROWS(group_bf16, a, k, rows, w, np, sums);
#endif
    if (isa >= 2) WITH_CONSTANT_ROWS(group_avx512, a, k, rows, w, np, sums);
#endif
#if defined(__AVX2__) && defined(__FMA__)
    if (isa >= 1) {
        group_avx2(a, k, rows, w, np, sums);
        return;
    }
#endif
    (void)isa;
    group_portable(a, k, rows, w, np, sums);
}

/* Output panels [g * GROUP, (g + 1) * GROUP) of out[M, N] = a[M, K] . w[N, K]^T (+ bias), on the calling thread:
 * one work item of `vec_linear_bf16`, and of kernels that split the work themselves (moe.c). */
void vec_linear_bf16_group(const uint16_t *a, const uint16_t *w_packed, const uint16_t *bias, void *out, int64_t m,
                           int64_t n, int64_t k, int isa, int out_dtype, int64_t g) {
    float sums[ROWS * GROUP * PANEL] __attribute__((aligned(64)));
    const int64_t panels = (n + PANEL - 1) / PANEL, p0 = g * GROUP;
    const int np = panels - p0 < GROUP ? (int)(panels - p0) : GROUP;
    const uint16_t *w = w_packed + p0 * k * PANEL;
    for (int64_t r = 0; r < m; r += ROWS) {
        const int rows = m - r < ROWS ? (int)(m - r) : ROWS;
        group_pass(isa, a + r * k, k, rows, w, np, sums);
        for (int i = 0; i < rows; i++)
            for (int p = 0; p < np; p++) {
                const int64_t col = (p0 + p) * PANEL, at = (r + i) * n + col;
                const float *s = sums + (i * GROUP + p) * PANEL;
                const uint16_t *b = bias ? bias + col : NULL;
                const int cols = n - col < PANEL ? (int)(n - col) : PANEL;
                if (out_dtype == 0)
                    store_panel_f32((float *)out + at, s, b, cols);
                else
                    store_panel_bf16((uint16_t *)out + at, s, b, cols);
            }
    }
}

int vec_linear_bf16(const uint16_t *a, const uint16_t *w_packed, const uint16_t *bias, void *out, int64_t m,
                    int64_t n, int64_t k, int isa, int out_dtype, int nthreads) {
    if (m <= 0 || n <= 0 || k % 2 != 0 || isa < 0 || isa > vec_gemm_best_isa() || (out_dtype != 0 && out_dtype != 1))
        return 1;
    const int64_t panels = (n + PANEL - 1) / PANEL, groups = (panels + GROUP - 1) / GROUP;
    /* Few groups (a small layer) are not worth waking a second thread for. */
    const int threads = groups < 2 * nthreads ? 1 : nthreads;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t g = 0; g < groups; g++) vec_linear_bf16_group(a, w_packed, bias, out, m, n, k, isa, out_dtype, g);
    return 0;
}
