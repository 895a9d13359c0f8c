/* The segmented LoRA product (Punica's SGMV / BGMV idea) added to a base linear's output, in one call per target
 * module: y[t] += (x[t] A_s^T) B_s^T for every token t whose adapter slot s = slots[t] is >= 0 (the torch reference
 * is kernels/lora.py's `lora_add_`).
 *
 * The pool holds A transposed, a_t [S][K][R], and b_t [S][R][N], fp32, the scaling folded into B, zero past a
 * slot's rank. Both products are axpys over contiguous rows (h += x[k] * a_t[s][k][:r], then y_row += h[j] *
 * b_t[s][j][:]), so they need no horizontal sums and read only the first ranks[s] columns of each; on AVX-512 a
 * token's rank-r sums (r <= 64) stay in registers over the K inputs, and each block of 64 outputs over the r terms.
 * x [T, K] and y [T, N] (rows ldx / ldy elements apart: y may be a column slice of a fused q/k/v or gate/up output) are fp32
 * (dtype 0) or bf16 (dtype 1); sums are fp32 and y is rounded once. Tokens come in runs sharing a slot (a sequence's
 * prefill), so a run's A and B stay in cache across its tokens. `isa`: vec_gemm.c's code paths (at most
 * `vec_gemm_best_isa()`), 2 and 3 both run the AVX-512 one, 1 AVX2 + FMA, 0 portable C.
 * Returns 0 when done, 1 on bad arguments, 2 when out of memory.
 */
#include <stdint.h>
#include <stdlib.h>

#include "bf16.h"
#include "kernels.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#define COLS 256 /* output columns per work item of the B product */

/* y[0:n] += a * x[0:n] on code path `isa` (ranks past what the register paths below hold). */
static inline void axpy(int isa, float a, const float *x, float *y, int64_t n) {
    int64_t j = 0;
#if defined(__AVX512F__)
    if (isa >= 2) {
        const __m512 va = _mm512_set1_ps(a);
        for (; j + 16 <= n; j += 16)
            _mm512_storeu_ps(y + j, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + j), _mm512_loadu_ps(y + j)));
        if (j < n) {
            const __mmask16 m = (__mmask16)((1u << (n - j)) - 1u);
            _mm512_mask_storeu_ps(y + j, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + j),
                                                            _mm512_maskz_loadu_ps(m, y + j)));
        }
        return;
    }
#endif
#if defined(__AVX2__) && defined(__FMA__)
    if (isa >= 1) {
        const __m256 va = _mm256_set1_ps(a);
        for (; j + 8 <= n; j += 8)
            _mm256_storeu_ps(y + j, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + j), _mm256_loadu_ps(y + j)));
    }
#endif
    (void)isa;
    for (; j < n; j++) y[j] += a * x[j];
}

static inline float load_x(const void *x, int dtype, int64_t i) {
    return dtype == 0 ? ((const float *)x)[i] : bf16_to_float(((const uint16_t *)x)[i]);
}

#if defined(__AVX512F__)
/* h[0:r] = x . A (A rows R apart), the r <= 16 * NV sums held in NV registers (NV a constant once inlined), in
 * 4 / NV interleaved sets over k so that at least four FMA chains run at once. */
static inline __attribute__((always_inline)) void xa_avx512(const char *xr, int dtype, const float *a, int64_t K,
                                                            int64_t R, int64_t r, float *h, const int NV) {
    const int U = NV >= 4 ? 1 : 4 / NV;
    __m512 acc[4][4];
    __mmask16 m[4];
    for (int v = 0; v < NV; v++) {
        for (int u = 0; u < U; u++) acc[u][v] = _mm512_setzero_ps();
        const int64_t left = r - 16 * v;
        m[v] = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
    }
    int64_t k = 0;
    for (; k + U <= K; k += U)
        for (int u = 0; u < U; u++) {
            const __m512 xk = _mm512_set1_ps(load_x(xr, dtype, k + u));
            for (int v = 0; v < NV; v++)
                acc[u][v] = _mm512_fmadd_ps(xk, _mm512_maskz_loadu_ps(m[v], a + (k + u) * R + 16 * v), acc[u][v]);
        }
    for (; k < K; k++) {
        const __m512 xk = _mm512_set1_ps(load_x(xr, dtype, k));
        for (int v = 0; v < NV; v++)
            acc[0][v] = _mm512_fmadd_ps(xk, _mm512_maskz_loadu_ps(m[v], a + k * R + 16 * v), acc[0][v]);
    }
    for (int v = 0; v < NV; v++) {
        for (int u = 1; u < U; u++) acc[0][v] = _mm512_add_ps(acc[0][v], acc[u][v]);
        _mm512_mask_storeu_ps(h + 16 * v, m[v], acc[0][v]);
    }
}

static inline __m512 load16(const char *yr, int dtype, int64_t c) {
    if (dtype == 0) return _mm512_loadu_ps((const float *)yr + c);
    const __m256i bits = _mm256_loadu_si256((const __m256i *)((const uint16_t *)yr + c));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

static inline void store16(char *yr, int dtype, int64_t c, __m512 v) {
    if (dtype == 0)
        _mm512_storeu_ps((float *)yr + c, v);
    else
        _mm256_storeu_si256((__m256i *)((uint16_t *)yr + c), _mm512_cvtepi32_epi16(bf16_bits(v)));
}

/* y[c0:c1] += h . B (B rows N apart), 64 columns (four independent registers) at a time, y fp32 or bf16, rounded
 * once. */
static void hb_avx512(const float *h, int64_t r, const float *b, int64_t N, int64_t c0, int64_t c1, char *yr,
                      int dtype) {
    int64_t c = c0;
    for (; c + 64 <= c1; c += 64) {
        __m512 acc[4];
        for (int v = 0; v < 4; v++) acc[v] = load16(yr, dtype, c + 16 * v);
        for (int64_t j = 0; j < r; j++) {
            const __m512 hj = _mm512_set1_ps(h[j]);
            for (int v = 0; v < 4; v++) acc[v] = _mm512_fmadd_ps(hj, _mm512_loadu_ps(b + j * N + c + 16 * v), acc[v]);
        }
        for (int v = 0; v < 4; v++) store16(yr, dtype, c + 16 * v, acc[v]);
    }
    for (; c + 16 <= c1; c += 16) {
        __m512 acc = load16(yr, dtype, c);
        for (int64_t j = 0; j < r; j++)
            acc = _mm512_fmadd_ps(_mm512_set1_ps(h[j]), _mm512_loadu_ps(b + j * N + c), acc);
        store16(yr, dtype, c, acc);
    }
    for (; c < c1; c++) {
        float acc = load_x(yr, dtype, c);
        for (int64_t j = 0; j < r; j++) acc += h[j] * b[j * N + c];
        if (dtype == 0)
            ((float *)yr)[c] = acc;
        else
            ((uint16_t *)yr)[c] = float_to_bf16(acc);
    }
}
#endif

/* h[0:r] = x[t] A_s on code path `isa`. */
static void xa(int isa, const char *xr, int dtype, const float *a, int64_t K, int64_t R, int64_t r, float *h) {
    if (r <= 0) return;  /* an empty slot: h stays zero */
#if defined(__AVX512F__)
    if (isa >= 2 && r <= 64) {
        switch ((r + 15) / 16) {
            case 1: xa_avx512(xr, dtype, a, K, R, r, h, 1); return;
            case 2: xa_avx512(xr, dtype, a, K, R, r, h, 2); return;
            case 3: xa_avx512(xr, dtype, a, K, R, r, h, 3); return;
            default: xa_avx512(xr, dtype, a, K, R, r, h, 4); return;
        }
    }
#endif
    for (int64_t j = 0; j < r; j++) h[j] = 0.0f;
    for (int64_t k = 0; k < K; k++) axpy(isa, load_x(xr, dtype, k), a + k * R, h, r);
}

/* y[t, c0:c1] += h B_s[:, c0:c1] on code path `isa`. */
static void hb(int isa, const float *h, int64_t r, const float *b, int64_t N, int64_t c0, int64_t c1, char *yr,
               int dtype) {
#if defined(__AVX512F__)
    if (isa >= 2) {
        hb_avx512(h, r, b, N, c0, c1, yr, dtype);
        return;
    }
#endif
    float acc[COLS];
    const int64_t cols = c1 - c0;
    for (int64_t c = 0; c < cols; c++) acc[c] = load_x(yr, dtype, c0 + c);
    for (int64_t j = 0; j < r; j++) axpy(isa, h[j], b + j * N + c0, acc, cols);
    for (int64_t c = 0; c < cols; c++) {
        if (dtype == 0)
            ((float *)yr)[c0 + c] = acc[c];
        else
            ((uint16_t *)yr)[c0 + c] = float_to_bf16(acc[c]);
    }
}

int lora_apply(const void *x, int64_t ldx, void *y, int64_t ldy, const float *a_t, const float *b_t,
               const int64_t *ranks, const int64_t *slots, int64_t T, int64_t K, int64_t N, int64_t R,
               int64_t num_slots, int dtype, int isa, int nthreads) {
    if (T < 0 || K <= 0 || N <= 0 || R <= 0 || (dtype != 0 && dtype != 1) || isa < 0 || isa > vec_gemm_best_isa())
        return 1;
    for (int64_t t = 0; t < T; t++)
        if (slots[t] >= num_slots || (slots[t] >= 0 && (ranks[slots[t]] < 0 || ranks[slots[t]] > R))) return 1;
    float *h = calloc((size_t)(T > 0 ? T : 1) * (size_t)R, sizeof(float));
    if (h == NULL) return 2;
    const size_t esize = dtype == 0 ? 4 : 2;
    /* h[t] = x[t] A_s^T, one token per work item */
#pragma omp parallel for num_threads(nthreads) schedule(static) if (T * K * R > 65536)
    for (int64_t t = 0; t < T; t++) {
        const int64_t s = slots[t];
        if (s >= 0)
            xa(isa, (const char *)x + (size_t)(t * ldx) * esize, dtype, a_t + s * K * R, K, R, ranks[s], h + t * R);
    }
    /* y[t, cols] += h[t] B_s^T over blocks of COLS output columns */
    const int64_t blocks = (N + COLS - 1) / COLS;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (T * N * R > 65536)
    for (int64_t item = 0; item < T * blocks; item++) {
        const int64_t t = item / blocks, c0 = (item % blocks) * COLS;
        const int64_t s = slots[t];
        if (s < 0) continue;
        const int64_t c1 = N - c0 < COLS ? N : c0 + COLS;
        hb(isa, h + t * R, ranks[s], b_t + s * R * N, N, c0, c1, (char *)y + (size_t)(t * ldy) * esize, dtype);
    }
    free(h);
    return 0;
}
