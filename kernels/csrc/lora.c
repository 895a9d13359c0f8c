/* The segmented LoRA product (Punica's SGMV / BGMV idea) added to a base linear's output, in one call per target
 * module: y[t] += (x[t] A_s^T) B_s^T for every token t whose adapter slot s = slots[t] is >= 0 (the torch reference
 * is kernels/lora.py's `lora_add_`).
 *
 * The pool holds A transposed, a_t [S][K][R], and b_t [S][R][N], fp32, the scaling folded into B, zero past a
 * slot's rank. Both products are axpys over contiguous rows (h += x[k] * a_t[s][k][:r], then y_row += h[j] *
 * b_t[s][j][:]), so they need no horizontal sums and read only the first ranks[s] columns of each. x [T, K] and y
 * [T, N] (rows ldx / ldy elements apart: y may be a column slice of a fused q/k/v or gate/up output) are fp32
 * (dtype 0) or bf16 (dtype 1); sums are fp32 and y is rounded once. Tokens come in runs sharing a slot (a sequence's
 * prefill), so a run's A and B stay in cache across its tokens. `isa`: vec_gemm.c's code paths (at most
 * `vec_gemm_best_isa()`), 2 and 3 both run the AVX-512 one, 1 AVX2 + FMA, 0 portable C. Returns 0 when done, 1 on bad arguments, 2 when out of memory.
 */
#include <stdint.h>
#include <stdlib.h>

#include "bf16.h"
#include "kernels.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#define COLS 256 /* output columns per work item of the B product */

/* y[0:n] += a * x[0:n] on code path `isa`. */
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
        if (s < 0) continue;
        const int64_t r = ranks[s];
        const float *a = a_t + s * K * R;
        const char *xr = (const char *)x + (size_t)(t * ldx) * esize;
        for (int64_t k = 0; k < K; k++) {
            const float xk = load_x(xr, dtype, k);
            axpy(isa, xk, a + k * R, h + t * R, r);
        }
    }
    /* y[t, cols] += h[t] B_s^T over blocks of COLS output columns */
    const int64_t blocks = (N + COLS - 1) / COLS;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (T * N * R > 65536)
    for (int64_t item = 0; item < T * blocks; item++) {
        const int64_t t = item / blocks, c0 = (item % blocks) * COLS;
        const int64_t s = slots[t];
        if (s < 0) continue;
        const int64_t cols = N - c0 < COLS ? N - c0 : COLS, r = ranks[s];
        float acc[COLS];
        char *yr = (char *)y + (size_t)(t * ldy + c0) * esize;
        for (int64_t c = 0; c < cols; c++) acc[c] = load_x(yr, dtype, c);
        const float *b = b_t + s * R * N + c0;
        for (int64_t j = 0; j < r; j++) axpy(isa, h[t * R + j], b + j * N, acc, cols);
        if (dtype == 0)
            for (int64_t c = 0; c < cols; c++) ((float *)yr)[c] = acc[c];
        else
            for (int64_t c = 0; c < cols; c++) ((uint16_t *)yr)[c] = float_to_bf16(acc[c]);
    }
    free(h);
    return 0;
}
