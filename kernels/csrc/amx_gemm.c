/* bf16 linear layers on Intel AMX tiles: out[M, N] = a[M, K] . w[N, K]^T (+ bias), fp32 accumulation; the output
 * rounded to bf16 (`out_dtype` 1) or stored as fp32 (0: the LM head's logits).
 *
 * oneDNN's AMX matmul reaches ~0.35-0.7 TFLOPS on this model's shapes with two threads (and halves at
 * M = 448..1024 when N is small); a plain 2x2-tile kernel over a weight packed once at load time does better
 * because every call has the same simple shape: the weight panel of 32 output columns stays in L2 while all
 * rows of `a` stream past it.
 *
 * Weight layout (see `amx_pack` in kernels/cpu_gemm.py): for each block of 16 output columns, for each block of
 * 32 input features, one 16 x 64-byte B tile whose row r holds, per column n, the pair
 * (w[n][32 kb + 2 r], w[n][32 kb + 2 r + 1]) -- the VNNI order TDPBF16PS reads.
 * Every function returns 0 when it did the work and nonzero when the caller must use another path.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amx.h"
#include "kernels.h"

#ifdef SPRIG_AMX
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define ROWS_PER_ITEM 128 /* rows of `a` one work item takes past its weight panel */

static int amx_state = -1; /* -1 unknown, 1 usable, 0 refused by the kernel */
#endif

/* 0 when this process may use AMX tiles (Linux grants the tile state on request), else nonzero. */
int amx_gemm_available(void) {
#ifdef SPRIG_AMX
    if (amx_state < 0)
        amx_state = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? 1 : 0;
    return amx_state == 1 ? 0 : 1;
#else
    return 1;
#endif
}

#ifdef SPRIG_AMX
/* Round 32 fp32 values (+ bias) to bf16 and store `cols` = 32 of them. */
static inline void store_row(uint16_t *dst, const float *src, const uint16_t *bias) {
    __m512 lo = _mm512_loadu_ps(src), hi = _mm512_loadu_ps(src + 16);
    if (bias) {
        __m512i b = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)bias));
        __m512i c = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(bias + 16)));
        lo = _mm512_add_ps(lo, _mm512_castsi512_ps(_mm512_slli_epi32(b, 16)));
        hi = _mm512_add_ps(hi, _mm512_castsi512_ps(_mm512_slli_epi32(c, 16)));
    }
    __m512bh packed = _mm512_cvtne2ps_pbh(hi, lo);
    _mm512_storeu_si512((void *)dst, (__m512i)packed);
}

/* The same 32 values (+ bias) stored as fp32, unrounded. */
static inline void store_row_f32(float *dst, const float *src, const uint16_t *bias) {
    for (int i = 0; i < 32; i++) {
        uint32_t bits = bias ? (uint32_t)bias[i] << 16 : 0;
        float b;
        memcpy(&b, &bits, sizeof b);
        dst[i] = src[i] + b;
    }
}

/* 32 rows x 32 columns of the output: rows `src` (stride k), weight columns from blocks b0, b1. */
static inline void block_32x32(const uint16_t *src, int64_t k, const uint16_t *b0, const uint16_t *b1,
                               float *acc) {
    const int64_t stride = k * 2;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t kb = 0; kb < k / 32; kb++) {
        _tile_loadd(4, src + kb * 32, stride);
        _tile_loadd(5, src + 16 * k + kb * 32, stride);
        _tile_loadd(6, b0 + kb * 512, 64);
        _tile_loadd(7, b1 + kb * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, acc, 128);
    _tile_stored(1, acc + 16, 128);
    _tile_stored(2, acc + 16 * 32, 128);
    _tile_stored(3, acc + 16 * 32 + 16, 128);
}
#endif

int amx_linear_bf16(const uint16_t *a, const uint16_t *w_packed, const uint16_t *bias, void *out, int64_t m,
                    int64_t n, int64_t k, int out_dtype, int nthreads) {
#ifdef SPRIG_AMX
    if (m <= 0 || n % 32 != 0 || k % 32 != 0 || (out_dtype != 0 && out_dtype != 1) || amx_gemm_available() != 0)
        return 1;
    const int64_t full_rows = m / 32 * 32;
    const int64_t tail = m - full_rows;
    uint16_t *padded = NULL; /* the last < 32 rows, zero-padded to a whole block */
    if (tail) {
        padded = aligned_alloc(64, (size_t)(32 * k * 2));
        if (!padded)
            return 2;
        memset(padded, 0, (size_t)(32 * k * 2));
        memcpy(padded, a + full_rows * k, (size_t)(tail * k * 2));
    }
    const int64_t panels = n / 32, row_items = (m + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM;
    const int64_t panel_elems = 2 * (k / 32) * 512; /* two 16-column blocks */
#pragma omp parallel num_threads(nthreads)
    {
        float acc[32 * 32] __attribute__((aligned(64)));
        amx_load_config();
        /* Items panel-major: a thread's consecutive items reuse the weight panel it already holds in L2. Dynamic,
         * so a thread the OS deschedules for a while does not leave the other waiting at the end. */
#pragma omp for schedule(dynamic, 2)
        for (int64_t item = 0; item < panels * row_items; item++) {
            const int64_t panel = item / row_items, first = (item % row_items) * ROWS_PER_ITEM;
            const int64_t last = first + ROWS_PER_ITEM < m ? first + ROWS_PER_ITEM : m;
            const uint16_t *b0 = w_packed + panel * panel_elems, *b1 = b0 + panel_elems / 2;
            for (int64_t r = first; r < last; r += 32) {
                const int rows = last - r < 32 ? (int)(last - r) : 32;
                block_32x32(r < full_rows ? a + r * k : padded, k, b0, b1, acc);
                const uint16_t *bb = bias ? bias + panel * 32 : NULL;
                for (int i = 0; i < rows; i++) {
                    const int64_t at = (r + i) * n + panel * 32;
                    if (out_dtype == 0)
                        store_row_f32((float *)out + at, acc + i * 32, bb);
                    else
                        store_row((uint16_t *)out + at, acc + i * 32, bb);
                }
            }
        }
        _tile_release();
    }
    free(padded);
    return 0;
#else
    (void)a, (void)w_packed, (void)bias, (void)out, (void)m, (void)n, (void)k, (void)out_dtype, (void)nthreads;
    return 1;
#endif
}
