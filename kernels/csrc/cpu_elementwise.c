// The per-layer elementwise ops of a decoder layer, fused (CPU, OpenMP): RMSNorm (optionally with the residual
// add), rotary embedding in place, the Hadamard rotation of fp8 KV's queries and keys, SiLU-and-multiply, and
// the KV pool store.
//
// In torch each of these is a chain of ops that each read and write the whole activation (RMSNorm alone is seven)
// and each pays the dispatcher; here each op is one pass over rows. Every result is rounded to the tensor dtype at
// the points where the torch reference (kernels/norm.py, rope.py, activation.py) rounds, and the norms add their
// sum of squares in torch's order, so the norms and rope match the reference bitwise; SiLU differs only by its
// exponential (a few fp32 ulps, an ulp of bf16/fp16 when that crosses a rounding boundary).
//
// Layouts: a "row" is the last dim (stride 1); rows are addressed by two outer indices with element strides
// (a [T, H, D] view of a fused qkv output, or a [T, N] matrix with H = 1). Outputs are contiguous.
// dtype: 0 fp32, 1 bf16, 2 fp16. Every function returns 0 when done, 1 when it cannot take the input.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bf16.h"
#include "kernels.h"
#include "kv_quant.h"

#define MAX_HEAD_DIM 1024  // the per-row buffers of the Hadamard rotation and the quantized KV store
#define PARALLEL_MIN 16384  // elements below which one thread beats the fork/join of a parallel region

static inline float load1(const void *p, int64_t i, int dtype) {
    if (dtype == 0) return ((const float *)p)[i];
    if (dtype == 1) return bf16_to_float(((const uint16_t *)p)[i]);
    return (float)((const _Float16 *)p)[i];
}

static inline void store1(void *p, int64_t i, float v, int dtype) {
    if (dtype == 0)
        ((float *)p)[i] = v;
    else if (dtype == 1)
        ((uint16_t *)p)[i] = float_to_bf16(v);
    else
        ((_Float16 *)p)[i] = (_Float16)v;
}

// v rounded to `dtype` and widened back: what a torch op on that dtype leaves between two ops.
static inline float round1(float v, int dtype) {
    if (dtype == 0) return v;
    if (dtype == 1) return bf16_to_float(float_to_bf16(v));
    return (float)(_Float16)v;
}

static inline int threads_for(int64_t elements, int num_threads) {
    return elements < PARALLEL_MIN || num_threads < 1 ? 1 : num_threads;
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define VEC512 1
#include <immintrin.h>

#include "vec_exp.h"

#define RN (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

// The first n (<= 16) elements of `dtype` at p as floats; lanes past n read as 0.
static inline __m512 load16(const void *p, int64_t n, int dtype) {
    const __mmask16 m = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
    if (dtype == 0) return _mm512_maskz_loadu_ps(m, p);
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (dtype == 1) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

// 16 floats to bf16, rounded to nearest even. The AVX512_BF16 instruction does it in one step but flushes
// denormals to zero (torch keeps them), so a vector holding a denormal takes the integer path.
static inline __m256i to_bf16(__m512 f) {
#if defined(__AVX512BF16__) && defined(__AVX512DQ__)
    if (!_mm512_fpclass_ps_mask(f, 0x20)) return (__m256i)_mm512_cvtneps_pbh(f);
#endif
    return _mm512_cvtepi32_epi16(bf16_bits(f));
}

static inline void store16(void *p, __m512 v, int64_t n, int dtype) {
    const __mmask16 m = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
    if (dtype == 0)
        _mm512_mask_storeu_ps(p, m, v);
    else if (dtype == 1)
        _mm256_mask_storeu_epi16(p, m, to_bf16(v));
    else
        _mm256_mask_storeu_epi16(p, m, _mm512_cvtps_ph(v, RN));
}

static inline __m512 round16(__m512 v, int dtype) {
    if (dtype == 0) return v;
    if (dtype == 1) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(to_bf16(v)), 16));
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, RN));
}

// Products, sums and differences through the _round_ intrinsics: the compiler never contracts those into an FMA,
// which would skip the rounding of the product that the torch reference performs.
static inline __m512 mul_rn(__m512 a, __m512 b) { return _mm512_mul_round_ps(a, b, RN); }
static inline __m512 add_rn(__m512 a, __m512 b) { return _mm512_add_round_ps(a, b, RN); }
static inline __m512 sub_rn(__m512 a, __m512 b) { return _mm512_sub_round_ps(a, b, RN); }

#endif

// ---- RMSNorm ----------------------------------------------------------------------------------------------------

// The sum of squares of a row, added in exactly the order of torch's vectorized inner sum (aten SumKernel.cpp,
// which runs on 8-lane float vectors here): rows of 4 vectors into 4 accumulators, cascaded to the next of 4
// levels every 16 rows; leftover vectors into the first accumulator; the accumulators folded in order; then the
// scalar tail from 0, then the 8 lanes in order. So `x.pow(2).mean(-1)` is matched bitwise, fp32 included.
#ifdef VEC512
typedef __m256 v8;
static inline v8 v8_zero(void) { return _mm256_setzero_ps(); }
static inline v8 v8_add(v8 a, v8 b) { return _mm256_add_ps(a, b); }
// Elements 8j..8j+7 squared; the empty asm keeps the compiler from fusing the square into the next add (an FMA
// would skip the rounding of the square that torch's pow performs).
static inline v8 v8_square(const char *p, int64_t j, int dtype, size_t es) {
    const char *q = p + (size_t)(j * 8) * es;
    __m256 v;
    if (dtype == 0)
        v = _mm256_loadu_ps((const float *)q);
    else if (dtype == 1)
        v = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)q)), 16));
    else
        v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)q));
    v = _mm256_mul_ps(v, v);
    __asm__("" : "+v"(v));
    return v;
}
static inline float v8_lane(v8 a, int l) {
    float lanes[8];
    _mm256_storeu_ps(lanes, a);
    return lanes[l];
}
#else
typedef struct {
    float l[8];
} v8;
static inline v8 v8_zero(void) { return (v8){{0}}; }
static inline v8 v8_add(v8 a, v8 b) {
    for (int l = 0; l < 8; l++) a.l[l] += b.l[l];
    return a;
}
static inline v8 v8_square(const char *p, int64_t j, int dtype, size_t es) {
    (void)es;
    v8 r;
    for (int l = 0; l < 8; l++) {
        volatile float sq = load1(p, j * 8 + l, dtype) * load1(p, j * 8 + l, dtype);  // volatile: no FMA (above)
        r.l[l] = sq;
    }
    return r;
}
static inline float v8_lane(v8 a, int l) { return a.l[l]; }
#endif

static float sum_squares(const char *p, int64_t n, int dtype, size_t es) {
    const int64_t vecs = n / 8, rows = vecs / 4;
    v8 acc[4][4];
    for (int lv = 0; lv < 4; lv++)
        for (int k = 0; k < 4; k++) acc[lv][k] = v8_zero();
    int64_t i = 0;
    while (i + 16 <= rows) {
        for (int64_t j = 0; j < 16; j++, i++)
            for (int k = 0; k < 4; k++) acc[0][k] = v8_add(acc[0][k], v8_square(p, 4 * i + k, dtype, es));
        for (int lv = 1; lv < 4; lv++) {
            for (int k = 0; k < 4; k++) {
                acc[lv][k] = v8_add(acc[lv][k], acc[lv - 1][k]);
                acc[lv - 1][k] = v8_zero();
            }
            if (i & (15 << (4 * lv))) break;
        }
    }
    for (; i < rows; i++)
        for (int k = 0; k < 4; k++) acc[0][k] = v8_add(acc[0][k], v8_square(p, 4 * i + k, dtype, es));
    for (int lv = 1; lv < 4; lv++)
        for (int k = 0; k < 4; k++) acc[0][k] = v8_add(acc[0][k], acc[lv][k]);
    for (int64_t j = rows * 4; j < vecs; j++) acc[0][0] = v8_add(acc[0][0], v8_square(p, j, dtype, es));
    for (int k = 1; k < 4; k++) acc[0][0] = v8_add(acc[0][0], acc[0][k]);
    float total = 0.0f;
    for (int64_t j = vecs * 8; j < n; j++) {
        const float v = load1(p, j, dtype);
        volatile float sq = v * v;  // rounded before the add, as torch's pow leaves it
        total += sq;
    }
    for (int l = 0; l < 8; l++) total += v8_lane(acc[0][0], l);
    return total;
}

// One row of n: s = x (+ r, summed in fp32 and written to the fp32 sum_out), then out = round(s * rsqrt(mean(s^2)
// + eps) * w), the normalize and the scale in fp32 with one rounding at the end (kernels/norm.py). x, w and out are
// `dtype`; r is `rdtype` (dtype or fp32: the residual stream stays fp32, kernels/norm.py's residual_dtype).
static inline __attribute__((always_inline)) void norm_row(const void *x, const void *r, float *sum_out, void *out,
                                                           const void *w, int64_t n, float eps, const int dtype,
                                                           const int rdtype) {
    const size_t es = dtype == 0 ? 4 : 2, rs = rdtype == 0 ? 4 : 2;
    const int sdtype = r ? 0 : dtype;  // the rows normalized: the fp32 sums, or x itself
    const void *s = r ? (const void *)sum_out : x;
    if (r) {
#ifdef VEC512
        for (int64_t i = 0; i < n; i += 16) {
            const int64_t m = n - i;
            const __m512 v = _mm512_add_ps(load16((const char *)x + i * es, m, dtype),
                                           load16((const char *)r + i * rs, m, rdtype));
            store16(sum_out + i, v, m, 0);
        }
#else
        for (int64_t i = 0; i < n; i++) sum_out[i] = load1(x, i, dtype) + load1(r, i, rdtype);
#endif
    }
    const size_t ss = sdtype == 0 ? 4 : 2;
    const float inv = 1.0f / sqrtf(sum_squares(s, n, sdtype, ss) / (float)n + eps);  // torch: sum / n + eps, 1/sqrt
#ifdef VEC512
    const __m512 iv = _mm512_set1_ps(inv);
    for (int64_t i = 0; i < n; i += 16) {
        const int64_t m = n - i;
        const __m512 y = _mm512_mul_ps(load16((const char *)s + i * ss, m, sdtype), iv);
        store16((char *)out + i * es, _mm512_mul_ps(y, load16((const char *)w + i * es, m, dtype)), m, dtype);
    }
#else
    for (int64_t i = 0; i < n; i++)
        store1(out, i, load1(s, i, sdtype) * inv * load1(w, i, dtype), dtype);
#endif
}

// x [A, B, N] with element strides (sxa, sxb, 1) → out [A * B, N] contiguous, both `dtype`. With `residual` (strides
// sra, srb; `res_dtype`: dtype or fp32) the rows normalized are x + residual in fp32, which are also written to
// `sum_out` [A * B, N] fp32.
int rms_norm(const void *x, const void *residual, void *out, void *sum_out, const void *weight, int64_t A,
             int64_t B, int64_t N, int64_t sxa, int64_t sxb, int64_t sra, int64_t srb, float eps, int dtype,
             int res_dtype, int num_threads) {
    if (dtype < 0 || dtype > 2 || N < 1 || (res_dtype != dtype && res_dtype != 0)) return 1;
    if (residual && !sum_out) return 1;
    const size_t es = dtype == 0 ? 4 : 2, rs = res_dtype == 0 ? 4 : 2;
    const int same = res_dtype == dtype;
    const int nt = threads_for(A * B * N, num_threads);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t row = 0; row < A * B; row++) {
        const int64_t a = row / B, b = row % B;
        const char *xr = (const char *)x + (size_t)(a * sxa + b * sxb) * es;
        const char *rr = residual ? (const char *)residual + (size_t)(a * sra + b * srb) * rs : NULL;
        float *so = residual ? (float *)sum_out + row * N : NULL;
        char *o = (char *)out + (size_t)(row * N) * es;
        // Constant dtypes per call site let the per-element dtype branches fold away.
        if (dtype == 0)
            norm_row(xr, rr, so, o, weight, N, eps, 0, 0);
        else if (dtype == 1)
            same ? norm_row(xr, rr, so, o, weight, N, eps, 1, 1) : norm_row(xr, rr, so, o, weight, N, eps, 1, 0);
        else
            same ? norm_row(xr, rr, so, o, weight, N, eps, 2, 2) : norm_row(xr, rr, so, o, weight, N, eps, 2, 0);
    }
    return 0;
}

// ---- Rotary embedding -------------------------------------------------------------------------------------------

// Rotate `heads` rows of D at x (head stride sh elements) by fp32 cos/sin, in place: (x1, x2) → (x1 cos - x2 sin,
// x2 cos + x1 sin) in fp32, each product and sum rounded to fp32 as torch does, then rounded once to the dtype.
#ifdef VEC512
static void rotate_heads(char *x, int64_t heads, int64_t sh, const float *cs, int64_t D, int dtype, size_t es) {
    const int64_t half = D / 2;
    for (int64_t h = 0; h < heads; h++) {
        char *p1 = x + (size_t)(h * sh) * es, *p2 = p1 + (size_t)half * es;
        for (int64_t i = 0; i < half; i += 16) {
            const int64_t m = half - i;
            const __m512 c = load16(cs + i, m, 0), s = load16(cs + half + i, m, 0);
            const __m512 x1 = load16(p1 + i * es, m, dtype), x2 = load16(p2 + i * es, m, dtype);
            const __m512 r1 = sub_rn(mul_rn(x1, c), mul_rn(x2, s));
            const __m512 r2 = add_rn(mul_rn(x2, c), mul_rn(x1, s));
            store16(p1 + i * es, r1, m, dtype);
            store16(p2 + i * es, r2, m, dtype);
        }
    }
}
#else
#if defined(__clang__)
#define NO_CONTRACT
#elif defined(__GNUC__)
#define NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define NO_CONTRACT
#endif
// Without contraction: an FMA would skip the fp32 rounding of each product that the reference performs.
static NO_CONTRACT void rotate_heads(char *x, int64_t heads, int64_t sh, const float *cs, int64_t D, int dtype,
                                     size_t es) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
    const int64_t half = D / 2;
    for (int64_t h = 0; h < heads; h++) {
        char *p1 = x + (size_t)(h * sh) * es, *p2 = p1 + (size_t)half * es;
        for (int64_t i = 0; i < half; i++) {
            const float c = cs[i], s = cs[half + i];
            const float x1 = load1(p1, i, dtype), x2 = load1(p2, i, dtype);
            const float a = x1 * c, b = x2 * s, e = x2 * c, f = x1 * s;
            store1(p1, i, a - b, dtype);
            store1(p2, i, e + f, dtype);
        }
    }
}
#endif

// q [T, Hq, D] (strides sq0, sq1, 1) and k [T, Hk, D] (strides sk0, sk1, 1) rotated in place by positions [T];
// cache fp32 [max_pos, D]: cos of the D/2 frequencies, then sin. Returns 1 (touching nothing) on a position out
// of range or an odd D.
int rotary_embedding(void *q, void *k, const int64_t *positions, const float *cache, int64_t T, int64_t Hq,
                     int64_t sq0, int64_t sq1, int64_t Hk, int64_t sk0, int64_t sk1, int64_t D, int64_t max_pos,
                     int dtype, int num_threads) {
    if (dtype < 0 || dtype > 2 || D % 2 != 0) return 1;
    for (int64_t t = 0; t < T; t++)
        if (positions[t] < 0 || positions[t] >= max_pos) return 1;
    const size_t es = dtype == 0 ? 4 : 2;
    const int nt = threads_for(T * (Hq + Hk) * D, num_threads);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t t = 0; t < T; t++) {
        const float *cs = cache + positions[t] * D;  // this token's cos/sin, fp32 as the reference uses them
        rotate_heads((char *)q + (size_t)(t * sq0) * es, Hq, sq1, cs, D, dtype, es);
        rotate_heads((char *)k + (size_t)(t * sk0) * es, Hk, sk1, cs, D, dtype, es);
    }
    return 0;
}

// ---- Hadamard rotation -----------------------------------------------------------------------------------------

// x [T, H, D] (strides s0, s1, 1) rotated in place by the orthonormal Hadamard matrix, in blocks of the largest power
// of two dividing D: the fast Walsh-Hadamard transform in fp32 (each stage adds and subtracts the pairs (j, j + h)
// of every run of 2h, kernels/hadamard.py's order), scaled by 1/sqrt(block) and rounded once to the dtype.
int hadamard_rotate(void *x, int64_t T, int64_t H, int64_t s0, int64_t s1, int64_t D, int dtype, int num_threads) {
    if (dtype < 0 || dtype > 2 || D < 1 || D > MAX_HEAD_DIM) return 1;
    const size_t es = dtype == 0 ? 4 : 2;
    const int64_t block = D & -D;
    const float scale = (float)(1.0 / sqrt((double)block));
    const int nt = threads_for(T * H * D, num_threads);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t t = 0; t < T; t++) {
        float v[MAX_HEAD_DIM];
        for (int64_t hd = 0; hd < H; hd++) {
            char *row = (char *)x + (size_t)(t * s0 + hd * s1) * es;
            for (int64_t i = 0; i < D; i++) v[i] = load1(row, i, dtype);
            for (int64_t b0 = 0; b0 < D; b0 += block)
                for (int64_t h = 1; h < block; h *= 2)
                    for (int64_t i = b0; i < b0 + block; i += 2 * h)
                        for (int64_t j = i; j < i + h; j++) {
                            const float a = v[j], b = v[j + h];
                            v[j] = a + b;
                            v[j + h] = a - b;
                        }
            for (int64_t i = 0; i < D; i++) store1(row, i, v[i] * scale, dtype);
        }
    }
    return 0;
}

// ---- SiLU and multiply ------------------------------------------------------------------------------------------

// out[i0:i1] = round(round(silu(g)) * u) for one row; inlined per dtype so the dtype branches fold away.
static inline __attribute__((always_inline)) void silu_span(const char *g, const char *u, char *o, int64_t i0,
                                                            int64_t i1, const int dtype) {
#ifdef VEC512
    const size_t es = dtype == 0 ? 4 : 2;
    for (int64_t i = i0; i < i1; i += 16) {
        const int64_t m = i1 - i;
        const __m512 gv = load16(g + i * es, m, dtype);
        const __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv)));
        const __m512 si = _mm512_div_ps(gv, d);  // a division, as torch: rcp14 + Newton measured no faster here
        store16(o + i * es, _mm512_mul_ps(round16(si, dtype), load16(u + i * es, m, dtype)), m, dtype);
    }
#else
    for (int64_t i = i0; i < i1; i++) {
        const float gv = load1(g, i, dtype);  // expf: libm's, correctly rounded or nearly
        store1(o, i, round1(gv / (1.0f + expf(-gv)), dtype) * load1(u, i, dtype), dtype);
    }
#endif
}

// x [R, 2I] (row stride sx elements: gate then up) → out [R, I] = round(round(silu(gate)) * up).
int silu_and_mul(const void *x, void *out, int64_t R, int64_t I, int64_t sx, int dtype, int num_threads) {
    if (dtype < 0 || dtype > 2) return 1;
    const size_t es = dtype == 0 ? 4 : 2;
    const int nt = threads_for(R * I, num_threads);
    // Rows split into chunks of `chunk` elements so a one-row decode spreads over the threads too.
    const int64_t chunk = 1024, per_row = (I + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t item = 0; item < R * per_row; item++) {
        const int64_t r = item / per_row, i0 = (item % per_row) * chunk;
        const int64_t i1 = I - i0 < chunk ? I : i0 + chunk;
        const char *g = (const char *)x + (size_t)(r * sx) * es, *u = g + (size_t)I * es;
        char *o = (char *)out + (size_t)(r * I) * es;
        if (dtype == 0)
            silu_span(g, u, o, i0, i1, 0);
        else if (dtype == 1)
            silu_span(g, u, o, i0, i1, 1);
        else
            silu_span(g, u, o, i0, i1, 2);
    }
    return 0;
}

// ---- KV store ---------------------------------------------------------------------------------------------------

// k, v [T, H, D] (strides sk0, sk1, 1 and sv0, sv1, 1) into k_cache/v_cache [num_slots, H, D] rows slots [T].
// Returns 1 (writing nothing) on a slot out of range.
// Rows of one token's heads into a quantized cache (kv_dtype 3-5, see kv_quant.h): codes and a bf16 scale per head.
static void store_quantized(uint8_t *codes, uint16_t *scales, const char *x, int64_t H, int64_t D, int64_t s1,
                            int dtype, size_t es, int kv_dtype) {
    float row[MAX_HEAD_DIM];
    for (int64_t h = 0; h < H; h++) {
        const char *xh = x + (size_t)(h * s1) * es;
        for (int64_t d = 0; d < D; d++) row[d] = load1(xh, d, dtype);
        kv_quantize_row(codes + h * D, scales + h, row, D, kv_dtype);
    }
}

// kv_dtype: the cache's element type, the input's `dtype` (a copy) or 3-5 (quantized, with k_scale / v_scale
// [num_slots, H] bf16).
int store_kv(void *k_cache, void *v_cache, const int64_t *slots, const void *k, const void *v, int64_t T,
             int64_t H, int64_t D, int64_t sk0, int64_t sk1, int64_t sv0, int64_t sv1, int64_t num_slots,
             int dtype, int num_threads, int kv_dtype, void *k_scale, void *v_scale) {
    if (dtype < 0 || dtype > 2) return 1;
    if (kv_dtype != dtype && !(kv_quantized(kv_dtype) && k_scale && v_scale && D <= MAX_HEAD_DIM)) return 1;
    for (int64_t t = 0; t < T; t++)
        if (slots[t] < 0 || slots[t] >= num_slots) return 1;
    const size_t es = dtype == 0 ? 4 : 2, row = (size_t)D * es;
    const int nt = threads_for(2 * T * H * D, num_threads);
    if (kv_dtype != dtype) {
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t t = 0; t < T; t++) {
            const int64_t off = slots[t] * H;
            const char *kt = (const char *)k + (size_t)(t * sk0) * es, *vt = (const char *)v + (size_t)(t * sv0) * es;
            store_quantized((uint8_t *)k_cache + off * D, (uint16_t *)k_scale + off, kt, H, D, sk1, dtype, es, kv_dtype);
            store_quantized((uint8_t *)v_cache + off * D, (uint16_t *)v_scale + off, vt, H, D, sv1, dtype, es, kv_dtype);
        }
        return 0;
    }
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t t = 0; t < T; t++) {
        char *kc = (char *)k_cache + (size_t)(slots[t] * H) * row;
        char *vc = (char *)v_cache + (size_t)(slots[t] * H) * row;
        for (int64_t h = 0; h < H; h++) {
            memcpy(kc + h * row, (const char *)k + (size_t)(t * sk0 + h * sk1) * es, row);
            memcpy(vc + h * row, (const char *)v + (size_t)(t * sv0 + h * sv1) * es, row);
        }
    }
    return 0;
}
