/* The segmented LoRA product (Punica's SGMV / BGMV idea) added to a base linear's output, in one call per linear
 * (q/k/v of a fused qkv_proj share their input, as gate/up do): for every token t whose adapter slot s = slots[t]
 * is >= 0, h = x[t] A_s^T over all the linear's target modules at once, then for each module p
 * y[t, ycol_p : ycol_p + w_p] += h[p R : p R + r] B_p^T (the torch reference is kernels/lora.py's `lora_add_`).
 *
 * The pool holds, per linear, A transposed side by side, a_t [S][K][P R] (module p in columns p R ...), and B,
 * b_t [S][R][NB] (module p in columns bcol_p ...), fp32 (wdtype 0) or bf16 (wdtype 1: a decode step reads every
 * slot's A and B from memory, as it reads the base weights, so half the bytes is most of the gain), the scaling
 * folded into B, zero past a slot's rank; `parts` [P][3] is each module's (ycol, w, bcol). x [T, K] and y [T, N] (rows ldx / ldy elements apart: y is the fused
 * output) are fp32 (dtype 0) or bf16 (dtype 1); sums are fp32 and y is rounded once.
 *
 * Tokens are grouped by slot (a prefill's run of one adapter, or a decode batch's rows of one adapter wherever they
 * sit) into work items of up to TB tokens, and an item reads its slot's A and B rows once for all of its tokens:
 * on AVX-512 a tile of TB tokens x up to 64 ranks (or output columns) sits in registers while the K inputs (the r
 * ranks) stream through, so each load of A or B feeds TB FMAs. `isa`: vec_gemm.c's code paths (at most
 * `vec_gemm_best_isa()`), 2 and 3 both run the AVX-512 one, 1 AVX2 + FMA (per token), 0 portable C.
 * Returns 0 when done, 1 on bad arguments, 2 when out of memory.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "kernels.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#define TB 4     /* tokens per work item */
#define COLS 256 /* output columns per pass of the per-token B product */

/* y[0:n] += a * x[0:n] on code path `isa` (the per-token paths below AVX-512). */
static inline void axpy(int isa, float a, const float *x, float *y, int64_t n) {
    int64_t j = 0;
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

/* y[0:n] += a * w[0:n], w fp32 or bf16 (wdtype), on code path `isa`. */
static inline void axpy_w(int isa, float a, const void *w, int wdtype, int64_t n, float *y) {
    if (wdtype == 0) {
        axpy(isa, a, (const float *)w, y, n);
        return;
    }
    const uint16_t *wb = (const uint16_t *)w;
    int64_t j = 0;
#if defined(__AVX2__) && defined(__FMA__)
    if (isa >= 1) {
        const __m256 va = _mm256_set1_ps(a);
        for (; j + 8 <= n; j += 8) {
            const __m256i bits = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(wb + j)));
            const __m256 wf = _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16));
            _mm256_storeu_ps(y + j, _mm256_fmadd_ps(va, wf, _mm256_loadu_ps(y + j)));
        }
    }
#endif
    for (; j < n; j++) y[j] += a * bf16_to_float(wb[j]);
}

/* w + i elements of wdtype */
static inline const void *at(const void *w, int wdtype, int64_t i) {
    return (const char *)w + i * (wdtype == 0 ? 4 : 2);
}

static inline void store_y(void *y, int dtype, int64_t i, float v) {
    if (dtype == 0)
        ((float *)y)[i] = v;
    else
        ((uint16_t *)y)[i] = float_to_bf16(v);
}

/* One module's place: y columns [ycol, ycol + w) take h[hoff : hoff + r] times B columns [bcol, bcol + w). */
typedef struct {
    int64_t ycol, w, bcol, hoff;
} Part;

/* One token at a time (code paths below AVX-512): h = x A over every module's ranks, then each module's columns. */
static void item_per_token(int isa, const char *const *xr, char *const *yr, int nt, int dtype, const void *a,
                           const void *b, int wd, int64_t K, int64_t PR, int64_t NB, int64_t r, const Part *parts,
                           int64_t P, float *h) {
    for (int t = 0; t < nt; t++) {
        for (int64_t j = 0; j < PR; j++) h[j] = 0.0f;
        for (int64_t k = 0; k < K; k++) {
            const float xk = load_x(xr[t], dtype, k);
            for (int64_t p = 0; p < P; p++) axpy_w(isa, xk, at(a, wd, k * PR + parts[p].hoff), wd, r, h + parts[p].hoff);
        }
        for (int64_t p = 0; p < P; p++)
            for (int64_t c0 = 0; c0 < parts[p].w; c0 += COLS) {
                float acc[COLS];
                const int64_t cols = parts[p].w - c0 < COLS ? parts[p].w - c0 : COLS, yc = parts[p].ycol + c0;
                for (int64_t c = 0; c < cols; c++) acc[c] = load_x(yr[t], dtype, yc + c);
                for (int64_t j = 0; j < r; j++)
                    axpy_w(isa, h[parts[p].hoff + j], at(b, wd, j * NB + parts[p].bcol + c0), wd, cols, acc);
                for (int64_t c = 0; c < cols; c++) store_y(yr[t], dtype, yc + c, acc[c]);
            }
    }
}

#if defined(__AVX512F__)
static inline __mmask16 tail_mask(int64_t left) {
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

static inline __m512 load16(const char *yr, int dtype, int64_t c, __mmask16 m) {
    if (dtype == 0) return _mm512_maskz_loadu_ps(m, (const float *)yr + c);
    const __m256i bits = _mm256_maskz_loadu_epi16(m, (const uint16_t *)yr + c);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

/* 16 weights from w + i (fp32 or bf16: WD, a constant once inlined), masked by m */
static inline __attribute__((always_inline)) __m512 loadw(const void *w, int64_t i, __mmask16 m, const int WD) {
    return WD == 0 ? _mm512_maskz_loadu_ps(m, (const float *)w + i) : load16((const char *)w, 1, i, m);
}

static inline void store16(char *yr, int dtype, int64_t c, __m512 v, __mmask16 m) {
    if (dtype == 0)
        _mm512_mask_storeu_ps((float *)yr + c, m, v);
    else
        _mm256_mask_storeu_epi16((uint16_t *)yr + c, m, _mm512_cvtepi32_epi16(bf16_bits(v)));
}

/* h[t][off[v] ...] = xs[t] . A for NT tokens and NV vectors of 16 ranks (masks m), in U interleaved sets of sums
 * over k so that at least eight FMA chains run at once (NT, NV constants once inlined). */
static inline __attribute__((always_inline)) void xa_tile(const float *const *xs, const void *a, int64_t K,
                                                          int64_t PR, const int64_t *off, const __mmask16 *m, float *h,
                                                          const int NT, const int NV, const int WD) {
    const int U = NT * NV >= 8 ? 1 : (NT * NV >= 4 ? 2 : 4);
    __m512 acc[4][4][4];
#pragma GCC unroll 4
    for (int u = 0; u < U; u++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[u][t][v] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + U <= K; k += U)
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) {
            const int64_t row = (k + u) * PR;
            __m512 av[4];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) av[v] = loadw(a, row + off[v], m[v], WD);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                const __m512 xk = _mm512_set1_ps(xs[t][k + u]);
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) acc[u][t][v] = _mm512_fmadd_ps(xk, av[v], acc[u][t][v]);
            }
        }
    for (; k < K; k++) {
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const __m512 xk = _mm512_set1_ps(xs[t][k]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[0][t][v] = _mm512_fmadd_ps(xk, loadw(a, k * PR + off[v], m[v], WD), acc[0][t][v]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
#pragma GCC unroll 4
            for (int u = 1; u < U; u++) acc[0][t][v] = _mm512_add_ps(acc[0][t][v], acc[u][t][v]);
            _mm512_mask_storeu_ps(h + t * PR + off[v], m[v], acc[0][t][v]);
        }
}

/* y[t][ycol + c ...] += h[t][hoff : hoff + r] . B[:, bcol + c ...] for NT tokens and NV vectors of 16 columns
 * (the last one masked by `last`), y fp32 or bf16, rounded once. */
static inline __attribute__((always_inline)) void hb_tile(const float *h, int64_t PR, const void *b, int64_t NB,
                                                          int64_t r, const Part *part, int64_t c, __mmask16 last,
                                                          char *const *yr, int dtype, const int NT, const int NV,
                                                          const int WD) {
    __m512 acc[4][4];
    __mmask16 m[4];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) m[v] = v == NV - 1 ? last : (__mmask16)0xffff;
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[t][v] = load16(yr[t], dtype, part->ycol + c + 16 * v, m[v]);
    const int64_t bc = part->bcol + c;
    for (int64_t j = 0; j < r; j++) {
        __m512 bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = loadw(b, bc + j * NB + 16 * v, m[v], WD);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const __m512 hj = _mm512_set1_ps(h[t * PR + part->hoff + j]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[t][v] = _mm512_fmadd_ps(hj, bv[v], acc[t][v]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) store16(yr[t], dtype, part->ycol + c + 16 * v, acc[t][v], m[v]);
}

#define XA(nt, nv) \
    case (nt) * 8 + (nv): \
        if (wd) xa_tile(xs, a, K, PR, off, m, h, nt, nv, 1); else xa_tile(xs, a, K, PR, off, m, h, nt, nv, 0); \
        break;
#define HB(nt, nv) \
    case (nt) * 8 + (nv): \
        if (wd) hb_tile(h, PR, b, NB, r, part, c, last, yr, dtype, nt, nv, 1); \
        else hb_tile(h, PR, b, NB, r, part, c, last, yr, dtype, nt, nv, 0); \
        break;

static void xa_group(int nt, int nv, const float *const *xs, const void *a, int wd, int64_t K, int64_t PR,
                     const int64_t *off, const __mmask16 *m, float *h) {
    switch (nt * 8 + nv) {
        XA(1, 1) XA(1, 2) XA(1, 3) XA(1, 4) XA(2, 1) XA(2, 2) XA(2, 3) XA(2, 4)
        XA(3, 1) XA(3, 2) XA(3, 3) XA(3, 4) XA(4, 1) XA(4, 2) XA(4, 3) XA(4, 4)
        default: break;
    }
}

static void hb_group(int nt, int nv, const float *h, int64_t PR, const void *b, int wd, int64_t NB, int64_t r,
                     const Part *part, int64_t c, __mmask16 last, char *const *yr, int dtype) {
    switch (nt * 8 + nv) {
        HB(1, 1) HB(1, 2) HB(1, 3) HB(1, 4) HB(2, 1) HB(2, 2) HB(2, 3) HB(2, 4)
        HB(3, 1) HB(3, 2) HB(3, 3) HB(3, 4) HB(4, 1) HB(4, 2) HB(4, 3) HB(4, 4)
        default: break;
    }
}

/* One item of nt <= TB tokens of one slot: xs its fp32 rows (bf16 ones converted into `scratch`), h [nt][PR]. */
static void item_avx512(const char *const *xr, char *const *yr, int nt, int dtype, const void *a, const void *b,
                        int wd, int64_t K, int64_t PR, int64_t NB, int64_t r, const Part *parts, int64_t P, float *h,
                        float *scratch) {
    const float *xs[TB];
    for (int t = 0; t < nt; t++) {
        if (dtype == 0) {
            xs[t] = (const float *)xr[t];
            continue;
        }
        float *row = scratch + t * K;
        for (int64_t k = 0; k < K; k += 16) {
            const __mmask16 mk = tail_mask(K - k);
            _mm512_mask_storeu_ps(row + k, mk, load16(xr[t], 1, k, mk));
        }
        xs[t] = row;
    }
    /* the ranks of every module, in groups of up to four vectors of 16 */
    int64_t off[4];
    __mmask16 m[4];
    int nv = 0;
    for (int64_t p = 0; p < P; p++)
        for (int64_t j = 0; j < r; j += 16) {
            off[nv] = parts[p].hoff + j;
            m[nv++] = tail_mask(r - j);
            if (nv == 4) {
                xa_group(nt, nv, xs, a, wd, K, PR, off, m, h);
                nv = 0;
            }
        }
    if (nv > 0) xa_group(nt, nv, xs, a, wd, K, PR, off, m, h);
    for (int64_t p = 0; p < P; p++) {
        const Part *part = &parts[p];
        for (int64_t c = 0; c < part->w; c += 64) {
            const int64_t left = part->w - c;
            const int vecs = left >= 64 ? 4 : (int)((left + 15) / 16);
            hb_group(nt, vecs, h, PR, b, wd, NB, r, part, c, tail_mask(left - 16 * (vecs - 1)), yr, dtype);
        }
    }
}
#endif

int lora_apply(const void *x, int64_t ldx, void *y, int64_t ldy, const void *a_t, const void *b_t,
               const int64_t *ranks, const int64_t *slots, const int64_t *parts_in, int64_t P, int64_t T, int64_t K,
               int64_t N, int64_t R, int64_t NB, int64_t num_slots, int dtype, int wdtype, int isa, int nthreads) {
    if (T < 0 || K <= 0 || N <= 0 || R <= 0 || NB <= 0 || P <= 0 || num_slots <= 0 || (dtype != 0 && dtype != 1) ||
        (wdtype != 0 && wdtype != 1) || isa < 0 || isa > vec_gemm_best_isa())
        return 1;
    for (int64_t p = 0; p < P; p++) {
        const int64_t ycol = parts_in[3 * p], w = parts_in[3 * p + 1], bcol = parts_in[3 * p + 2];
        if (ycol < 0 || w <= 0 || bcol < 0 || ycol + w > N || bcol + w > NB) return 1;
    }
    for (int64_t t = 0; t < T; t++)
        if (slots[t] >= num_slots || (slots[t] >= 0 && (ranks[slots[t]] < 0 || ranks[slots[t]] > R))) return 1;
    const int64_t PR = P * R;
    /* order: the tokens with an adapter, grouped by slot (counting sort); first / count: each item's tokens */
    int64_t *buf = malloc(sizeof(int64_t) * (size_t)(3 * T + num_slots + 2));
    Part *parts = malloc(sizeof(Part) * (size_t)P);
    if (buf == NULL || parts == NULL) {
        free(buf);
        free(parts);
        return 2;
    }
    for (int64_t p = 0; p < P; p++)
        parts[p] = (Part){parts_in[3 * p], parts_in[3 * p + 1], parts_in[3 * p + 2], p * R};
    int64_t *order = buf, *first = buf + T, *count = buf + 2 * T, *start = buf + 3 * T;
    memset(start, 0, sizeof(int64_t) * (size_t)(num_slots + 1));
    for (int64_t t = 0; t < T; t++)
        if (slots[t] >= 0) start[slots[t] + 1]++;
    for (int64_t s = 0; s < num_slots; s++) start[s + 1] += start[s];
    for (int64_t t = 0; t < T; t++)
        if (slots[t] >= 0) order[start[slots[t]]++] = t;
    int64_t items = 0, done = 0;
    for (int64_t s = 0; s < num_slots; s++) { /* start[s] is now the end of slot s's tokens */
        for (int64_t i = done; i < start[s]; i += TB) {
            first[items] = i;
            count[items++] = start[s] - i < TB ? start[s] - i : TB;
        }
        done = start[s];
    }
    const size_t esize = dtype == 0 ? 4 : 2;
    int64_t work = 0;
    for (int64_t p = 0; p < P; p++) work += K + parts[p].w;
    int failed = 0;
#pragma omp parallel num_threads(nthreads) if (items > 1 && done * work * R > 65536) reduction(| : failed)
    {
        float *h = malloc(sizeof(float) * (size_t)(TB * PR + TB * K));
        failed = h == NULL;
#pragma omp for schedule(static)
        for (int64_t i = 0; i < items; i++) {
            if (h == NULL) continue;
            const char *xr[TB];
            char *yr[TB];
            const int nt = (int)count[i];
            for (int t = 0; t < nt; t++) {
                const int64_t tok = order[first[i] + t];
                xr[t] = (const char *)x + (size_t)(tok * ldx) * esize;
                yr[t] = (char *)y + (size_t)(tok * ldy) * esize;
            }
            const int64_t s = slots[order[first[i]]], r = ranks[s];
            if (r == 0) continue;  /* an empty slot adds nothing */
            const void *a = at(a_t, wdtype, s * K * PR), *b = at(b_t, wdtype, s * R * NB);
#if defined(__AVX512F__)
            if (isa >= 2) {
                item_avx512(xr, yr, nt, dtype, a, b, wdtype, K, PR, NB, r, parts, P, h, h + TB * PR);
                continue;
            }
#endif
            item_per_token(isa, xr, yr, nt, dtype, a, b, wdtype, K, PR, NB, r, parts, P, h);
        }
        free(h);
    }
    free(buf);
    free(parts);
    return failed ? 2 : 0;
}
