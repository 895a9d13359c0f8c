/* GGML block-quantized linears and embedding lookups, reading the GGUF blocks as they are stored.
 *
 * Weights: rows of GGML blocks (Q4_0, Q4_1, Q8_0: 32 weights; Q4_K, Q5_K, Q6_K: 256), the layouts of llama.cpp's
 * ggml-common.h, or sprig's Q4_G128 (128 weights: AWQ / GPTQ groups, see kernels/ggml_quants.py). Nothing is
 * re-laid out at load. Three ways through a product, by size (kernels/cpu_block_quant.py has the measurements):
 *  - decode sizes (m <= 16) on AVX512_VNNI: `direct_rows` reads 64 weights at a time (two 32-weight blocks, a
 *    quarter of a K-quant super-block or half a Q4_G128 block) into one zmm of codes and spreads their scales and
 *    offsets over the lanes in registers, against up to 4 activation rows;
 *  - prefill sizes (m >= 8) with bf16 activations where the build has AVX512_BF16: `run_wide` widens 64 weight
 *    rows at a time to bf16 in vec_gemm.c's packed layout and runs vec_linear_bf16 (activations stay bf16);
 *  - otherwise (fp32 activations at prefill sizes, the AVX2 / AVX-VNNI / portable paths):
 *    a work item decodes TILE_N weight rows into a scratch -- unsigned codes, a float scale per 16 weights
 *    (repeated per 4, one per VPDPBUSD lane) and a float offset per 16 -- so every format is value = scale * code
 *    + offset, and one dot product per path serves them all.
 *
 * The first and third quantize the activations per block of 32 to two int8 codes each: xs = max|x| / 127,
 * q = x / xs (so |q| <= 127), c = rint(q) and l = rint(128 (q - c)) in [-64, 64], x ~= xs (c + l / 128), an error
 * of at most xs / 256 -- 128 times less than llama.cpp's q8_0 (c alone), whose error was enough to flip the first
 * answer token of SmolLM2-135M (top two logits 0.09 apart). Then per group g of 16 weights
 *     sum_i (s_g q_i + o_g) x_i  ~=  s_g (xs / 128) isum_g + o_g (xs / 128) csum_g,
 *     isum_g = sum_i q_i (128 c_i + l_i),  csum_g = sum_i (128 c_i + l_i)
 * with the integer sums exact (two VPDPBUSD, u8 codes x s8 activation codes, and a shift; AVX2: 128 c + l as
 * s16, VPMADDWD) and (xs / 128) csum computed once per activation row.
 *
 * `isa` (0 portable, 1 AVX2, 2 AVX-VNNI, 3 AVX512_VNNI: vnni.h, as int8_gemm.c) picks the path; the paths add the
 * floats in different orders, so they agree to a few ulps, not bitwise. `bq_embedding` dequantizes rows exactly as
 * kernels/ggml_quants.py (and the gguf package) does -- the same float operations in the same order, no FMA
 * contraction in this file -- so its rows are bit-identical to the reference's. Each returns 0 when done, else
 * nonzero (bad sizes or type, a path this build lacks, no memory).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")  /* the dequantized rows round each step, as the reference does */
#endif

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "kernels.h"
#include "vnni.h"

/* GGML type ids, and sprig's own Q4_G128 (AWQ / GPTQ groups: fp16 scale, uint8 zero, pad, 64 bytes of codes) */
enum { T_Q4_0 = 2, T_Q4_1 = 3, T_Q8_0 = 8, T_Q4_K = 12, T_Q5_K = 13, T_Q6_K = 14, T_Q4_G128 = 1000 };

#define CHUNK 64   /* weights per VPDPBUSD zmm; rows are decoded padded to whole chunks */
#define TILE_N 8   /* weight rows one work item decodes, then meets every activation row with */
#define MAX_K 65536

int bq_best_isa(void) { return vnni_best_isa(); }

/* ---- formats ---- */
typedef struct {
    int block;  /* weights per block */
    int bytes;  /* bytes per block */
    int zero;   /* value = scale * (code - zero) when >= 0, else scale * code + offset */
} Format;

static int format_of(int qtype, Format *f) {
    switch (qtype) {
        case T_Q4_0: *f = (Format){32, 18, 8}; return 0;
        case T_Q4_1: *f = (Format){32, 20, -1}; return 0;
        case T_Q8_0: *f = (Format){32, 34, 128}; return 0;
        case T_Q4_K: *f = (Format){256, 144, -1}; return 0;
        case T_Q5_K: *f = (Format){256, 176, -1}; return 0;
        case T_Q6_K: *f = (Format){256, 210, 32}; return 0;
        case T_Q4_G128: *f = (Format){128, 68, -1}; return 0;  /* the zero is per block: an offset */
        default: return 1;
    }
}

static inline float f16_to_float(const uint8_t *p) {
    const uint16_t h = (uint16_t)(p[0] | (p[1] << 8));
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {  /* zero or subnormal: man * 2^-24, exact in float */
        const float f = (float)man * (1.0f / 16777216.0f);
        memcpy(&bits, &f, 4);
        bits |= sign;
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float out;
    memcpy(&out, &bits, 4);
    return out;
#endif
}

/* 16-byte vectors (GCC vector extensions: SIMD on every target, no intrinsics per ISA). */
typedef uint8_t u8x16 __attribute__((vector_size(16)));

static inline u8x16 load16(const uint8_t *p) {
    u8x16 v;
    memcpy(&v, p, 16);
    return v;
}

static inline void store16(uint8_t *p, u8x16 v) { memcpy(p, &v, 16); }

/* 16 n bytes → 32 n codes: their low nibbles, then their high ones (the order of every 4-bit GGML format). */
static inline void nibbles(const uint8_t *q, int n, uint8_t *c) {
    for (int i = 0; i < n; i++) {
        const u8x16 v = load16(q + 16 * i);
        store16(c + 16 * i, v & 15);
        store16(c + 16 * (n + i), v >> 4);
    }
}

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block j from the 12 packed bytes. */
static inline void scale_min_k4(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Where a decoded row goes: codes, then per group of 16 weights `rep` copies of its scale (4: one per VPDPBUSD
 * lane, for the dot products; 1: for exact dequantization) and one offset. */
typedef struct {
    uint8_t *codes;
    float *scale;
    float *offset;
} Decoded;

typedef float f32x4 __attribute__((vector_size(16)));

static inline __attribute__((always_inline)) void put_group(Decoded d, int64_t g, const int rep, float s, float o) {
    if (rep == 4) {
        const f32x4 v = {s, s, s, s};
        memcpy(d.scale + 4 * g, &v, sizeof v);  /* one vector store */
    } else {
        for (int l = 0; l < rep; l++) d.scale[rep * g + l] = s;
    }
    d.offset[g] = o;
}

/* One block (at group g0 of the row) → its codes, scales and offsets. */
static inline __attribute__((always_inline)) void decode_block(const int qtype, const uint8_t *b, Decoded d,
                                                               int64_t g0, const int rep) {
    uint8_t *c = d.codes + 16 * g0;
    switch (qtype) {
        case T_Q4_0: {
            const float s = f16_to_float(b);
            nibbles(b + 2, 1, c);
            put_group(d, g0, rep, s, -8.0f * s);
            put_group(d, g0 + 1, rep, s, -8.0f * s);
            return;
        }
        case T_Q4_1: {
            const float s = f16_to_float(b), m = f16_to_float(b + 2);
            nibbles(b + 4, 1, c);
            put_group(d, g0, rep, s, m);
            put_group(d, g0 + 1, rep, s, m);
            return;
        }
        case T_Q8_0: {
            const float s = f16_to_float(b);
            store16(c, load16(b + 2) ^ 0x80);  /* q + 128 */
            store16(c + 16, load16(b + 18) ^ 0x80);
            put_group(d, g0, rep, s, -128.0f * s);
            put_group(d, g0 + 1, rep, s, -128.0f * s);
            return;
        }
        case T_Q4_K:
        case T_Q5_K: {
            const float dd = f16_to_float(b), dmin = f16_to_float(b + 2);
            const uint8_t *qs = b + (qtype == T_Q4_K ? 16 : 48);
            for (int j = 0; j < 4; j++) nibbles(qs + 32 * j, 2, c + 64 * j);
            if (qtype == T_Q5_K) {
                const u8x16 h0 = load16(b + 16), h1 = load16(b + 32);
                for (int j = 0; j < 8; j++) {
                    store16(c + 32 * j, load16(c + 32 * j) | (((h0 >> j) & 1) << 4));
                    store16(c + 32 * j + 16, load16(c + 32 * j + 16) | (((h1 >> j) & 1) << 4));
                }
            }
            for (int j = 0; j < 8; j++) {
                int sc, m;
                scale_min_k4(b + 4, j, &sc, &m);
                const float s = dd * (float)sc, o = -(dmin * (float)m);
                put_group(d, g0 + 2 * j, rep, s, o);
                put_group(d, g0 + 2 * j + 1, rep, s, o);
            }
            return;
        }
        case T_Q6_K: {
            const int8_t *sc = (const int8_t *)(b + 192);
            const float dd = f16_to_float(b + 208);
            for (int n = 0; n < 2; n++)
                for (int l = 0; l < 32; l += 16) {
                    const u8x16 lo0 = load16(b + 64 * n + l), lo1 = load16(b + 64 * n + 32 + l);
                    const u8x16 h = load16(b + 128 + 32 * n + l);
                    uint8_t *e = c + 128 * n + l;
                    store16(e, (lo0 & 15) | ((h & 3) << 4));
                    store16(e + 32, (lo1 & 15) | (((h >> 2) & 3) << 4));
                    store16(e + 64, (lo0 >> 4) | (((h >> 4) & 3) << 4));
                    store16(e + 96, (lo1 >> 4) | (((h >> 6) & 3) << 4));
                }
            for (int g = 0; g < 16; g++) {
                const float s = dd * (float)sc[g];
                put_group(d, g0 + g, rep, s, -32.0f * s);
            }
            return;
        }
        case T_Q4_G128: {
            /* z * s is exact in float (an 8-bit zero times an 11-bit fp16 mantissa), and so is
             * s * q + (-z s) in bq_embedding: the reference's s * (q - z) bit for bit */
            const float s = f16_to_float(b), o = -((float)b[2] * s);
            nibbles(b + 4, 4, c);
            for (int g = 0; g < 8; g++) put_group(d, g0 + g, rep, s, o);
            return;
        }
        default: return;
    }
}

static inline __attribute__((always_inline)) void decode_blocks(const int qtype, Format f, const uint8_t *row,
                                                                int64_t k, Decoded d, const int rep) {
    for (int64_t b = 0; b < k / f.block; b++) decode_block(qtype, row + b * f.bytes, d, b * f.block / 16, rep);
}

/* Row of `k` weights → codes and `rep` scales and an offset per group of 16, each padded with zeros to kp. */
static inline __attribute__((always_inline)) void decode_row(int qtype, Format f, const uint8_t *row, int64_t k,
                                                             int64_t kp, Decoded d, const int rep) {
    switch (qtype) {  /* the format constant in each loop: the block decoder inlined and unrolled */
        case T_Q4_0: decode_blocks(T_Q4_0, f, row, k, d, rep); break;
        case T_Q4_1: decode_blocks(T_Q4_1, f, row, k, d, rep); break;
        case T_Q8_0: decode_blocks(T_Q8_0, f, row, k, d, rep); break;
        case T_Q4_K: decode_blocks(T_Q4_K, f, row, k, d, rep); break;
        case T_Q5_K: decode_blocks(T_Q5_K, f, row, k, d, rep); break;
        case T_Q6_K: decode_blocks(T_Q6_K, f, row, k, d, rep); break;
        case T_Q4_G128: decode_blocks(T_Q4_G128, f, row, k, d, rep); break;
        default: break;
    }
    memset(d.codes + k, 0, (size_t)(kp - k));
    for (int64_t g = k / 16; g < kp / 16; g++) put_group(d, g, rep, 0.0f, 0.0f);
}

static void decode_for_dot(int qtype, Format f, const uint8_t *row, int64_t k, int64_t kp, Decoded d) {
    decode_row(qtype, f, row, k, kp, d, 4);
}

/* A decoded row for the dot products: codes [kp], 4 scales per 16 weights [kp/4], offsets [kp/16]. */
static size_t decoded_bytes(int64_t kp) { return (size_t)kp + (size_t)kp + (size_t)kp / 4; }

static Decoded decoded_at(uint8_t *base, int64_t kp) {
    return (Decoded){base, (float *)(base + kp), (float *)(base + 2 * kp)};
}

/* ---- activations: per block of 32, x ~= xs (c + l / 128) with codes c and residual codes l, a scale xs / 128
 * per 4 values (one per lane), and the sums of 128 c + l (times that scale) per 16 and per lane ---- */
typedef struct {
    int8_t *codes;     /* [kp]: c = rint(x / xs) */
    int8_t *low;       /* [kp]: l = rint(128 (x / xs - c)), in [-64, 64] */
    float *lane_scale; /* [kp/4]: xs / 128 */
    float *csum;       /* [kp/16]: xs / 128 * the group's sum of 128 c + l */
    float *lane_csum;  /* [kp/4]: xs / 128 * each lane's sum of 128 c + l (the direct path) */
} Act;

static size_t act_bytes(int64_t kp) { return 4 * (size_t)kp + (size_t)kp / 4; }

static inline float load_x(const void *row, int dtype, int64_t i) {
    return dtype ? bf16_to_float(((const uint16_t *)row)[i]) : ((const float *)row)[i];
}

static void quantize_act(const void *x, int dtype, int64_t k, int64_t kp, Act a) {
    for (int64_t b = 0; b < kp / 32; b++) {
        float v[32] = {0}, amax = 0.0f;
        if (b * 32 < k)
            for (int i = 0; i < 32; i++) {
                v[i] = load_x(x, dtype, b * 32 + i);
                const float m = fabsf(v[i]);
                if (m > amax) amax = m;
            }
        const int zero = !(amax >= 1e-30f);
        const float inv = zero ? 0.0f : 127.0f / amax, xs = zero ? 0.0f : amax / 127.0f / 128.0f;
        int sums[2] = {0, 0}, lanes[8] = {0};
        for (int i = 0; i < 32; i++) {
            const float q = fminf(fmaxf(v[i] * inv, -127.0f), 127.0f), c = rintf(q), l = rintf((q - c) * 128.0f);
            a.codes[b * 32 + i] = (int8_t)c;
            a.low[b * 32 + i] = (int8_t)l;
            const int both = 128 * (int)c + (int)l;  /* |both| <= 16320: exact in the int32 sums and in float */
            sums[i / 16] += both;
            lanes[i / 4] += both;
        }
        for (int l = 0; l < 8; l++) a.lane_csum[b * 8 + l] = xs * (float)lanes[l];
        for (int l = 0; l < 8; l++) a.lane_scale[b * 8 + l] = xs;
        a.csum[2 * b] = xs * (float)sums[0];
        a.csum[2 * b + 1] = xs * (float)sums[1];
    }
}

/* ---- dot products of one activation row with nw (<= 4) decoded weight rows ---- */
static float offsets(const Act *a, const Decoded *w, int64_t kp) {
    float acc = 0.0f;
    for (int64_t g = 0; g < kp / 16; g++) acc += w->offset[g] * a->csum[g];
    return acc;
}

static void dot_portable(const Act *a, const Decoded *w, int nw, int64_t kp, float *out) {
    for (int j = 0; j < nw; j++) {
        float acc = 0.0f;
        for (int64_t g = 0; g < kp / 16; g++) {
            int32_t isum = 0;
            for (int i = 0; i < 16; i++)
                isum += (int32_t)w[j].codes[16 * g + i] * (128 * a->codes[16 * g + i] + a->low[16 * g + i]);
            acc += (float)isum * (w[j].scale[4 * g] * a->lane_scale[4 * g]);
        }
        out[j] = acc + offsets(a, &w[j], kp);
    }
}

#if defined(HAVE_VNNI512)
/* Per lane: the sum of 4 codes times their activations' 128 c + l (two VPDPBUSD, one shift). */
static inline __m512i dot64(__m512i w, __m512i c, __m512i l) {
    const __m512i zero = _mm512_setzero_si512();
    return _mm512_add_epi32(_mm512_slli_epi32(_mm512_dpbusd_epi32(zero, w, c), 7), _mm512_dpbusd_epi32(zero, w, l));
}

static float offsets512(const Act *a, const Decoded *w, int64_t kp) {
    __m512 acc = _mm512_setzero_ps();
    int64_t g = 0;
    for (; g + 16 <= kp / 16; g += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(w->offset + g), _mm512_loadu_ps(a->csum + g), acc);
    const __mmask16 tail = (__mmask16)((1u << (kp / 16 - g)) - 1);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w->offset + g), _mm512_maskz_loadu_ps(tail, a->csum + g), acc);
    return _mm512_reduce_add_ps(acc);
}

static inline __attribute__((always_inline)) void dot_vnni512_n(const Act *a, const Decoded *w, const int nw,
                                                                int64_t kp, float *out) {
    __m512 acc[4];
    for (int j = 0; j < 4; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t t = 0; t < kp / CHUNK; t++) {
        const __m512i x = _mm512_loadu_si512(a->codes + t * CHUNK), xl = _mm512_loadu_si512(a->low + t * CHUNK);
        const __m512 xs = _mm512_loadu_ps(a->lane_scale + t * 16);
        for (int j = 0; j < nw; j++) {
            const __m512i s = dot64(_mm512_loadu_si512(w[j].codes + t * CHUNK), x, xl);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(_mm512_loadu_ps(w[j].scale + t * 16), xs),
                                     acc[j]);
        }
    }
    for (int j = 0; j < nw; j++) out[j] = _mm512_reduce_add_ps(acc[j]) + offsets512(a, &w[j], kp);
}

static void dot_vnni512(const Act *a, const Decoded *w, int nw, int64_t kp, float *out) {
    if (nw == 4) dot_vnni512_n(a, w, 4, kp, out);  /* a constant count: the accumulators stay in registers */
    else dot_vnni512_n(a, w, nw, kp, out);
}
#endif

#if defined(__AVX2__)
static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static float offsets256(const Act *a, const Decoded *w, int64_t kp) {
    __m256 acc = _mm256_setzero_ps();
    int64_t g = 0;
    for (; g + 8 <= kp / 16; g += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(w->offset + g), _mm256_loadu_ps(a->csum + g), acc);
    float rest = 0.0f;
    for (; g < kp / 16; g++) rest += w->offset[g] * a->csum[g];
    return hsum256(acc) + rest;
}

/* No VNNI: per group of 16, both operands widened to s16 and VPMADDWD (int32 pair sums: VPMADDUBSW's int16 ones
 * would saturate on Q8_0's codes), then the 8 lanes times the group's scale. */
static void dot_avx2(const Act *a, const Decoded *w, int nw, int64_t kp, float *out) {
    for (int j = 0; j < nw; j++) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t g = 0; g < kp / 16; g++) {
            const __m256i wc = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(w[j].codes + 16 * g)));
            const __m256i xc = _mm256_add_epi16(
                _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(a->codes + 16 * g))), 7),
                _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(a->low + 16 * g))));  /* 128 c + l */
            const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(wc, xc));
            acc = _mm256_fmadd_ps(p, _mm256_set1_ps(w[j].scale[4 * g] * a->lane_scale[4 * g]), acc);
        }
        out[j] = hsum256(acc) + offsets256(a, &w[j], kp);
    }
}
#endif

#if defined(HAVE_VNNI256)
static void dot_vnni256(const Act *a, const Decoded *w, int nw, int64_t kp, float *out) {
    for (int j = 0; j < nw; j++) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t h = 0; h < kp / 32; h++) {
            const __m256i wc = _mm256_loadu_si256((const __m256i *)(w[j].codes + 32 * h)), zero = _mm256_setzero_si256();
            const __m256i s = _mm256_add_epi32(
                _mm256_slli_epi32(dpbusd256(zero, wc, _mm256_loadu_si256((const __m256i *)(a->codes + 32 * h))), 7),
                dpbusd256(zero, wc, _mm256_loadu_si256((const __m256i *)(a->low + 32 * h))));
            const __m256 sc = _mm256_mul_ps(_mm256_loadu_ps(w[j].scale + 8 * h), _mm256_loadu_ps(a->lane_scale + 8 * h));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), sc, acc);
        }
        out[j] = hsum256(acc) + offsets256(a, &w[j], kp);
    }
}
#endif

typedef void (*DotFn)(const Act *a, const Decoded *w, int nw, int64_t kp, float *out);

static DotFn dot_for(int isa) {
#if defined(HAVE_VNNI512)
    if (isa >= ISA_AVX512_VNNI) return dot_vnni512;
#endif
#if defined(HAVE_VNNI256)
    if (isa >= ISA_AVX_VNNI) return dot_vnni256;
#endif
#if defined(__AVX2__)
    if (isa >= ISA_AVX2) return dot_avx2;
#endif
    (void)isa;
    return dot_portable;
}

/* ---- AVX512_VNNI, the blocks read straight from the rows (decode sizes: each weight meets few rows) ----
 * 64 weights make one zmm of codes; their scales and offsets are spread over the lanes in registers. */
#if defined(HAVE_VNNI512)
#define DIRECT_MAX_M 16  /* more activation rows: decoding into the scratch once per tile pays */

static inline __attribute__((always_inline)) __m512i codes64(const int qtype, const uint8_t *b0, const uint8_t *b1) {
    if (qtype == T_Q8_0) {
        const __m256i q0 = _mm256_loadu_si256((const __m256i *)(b0 + 2)), q1 = _mm256_loadu_si256((const __m256i *)(b1 + 2));
        return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1), _mm512_set1_epi8((char)0x80));
    }
    const int at = qtype == T_Q4_0 ? 2 : 4;
    const __m256i y = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(b0 + at))),
                                              _mm_loadu_si128((const __m128i *)(b1 + at)), 1);
    const __m256i low = _mm256_set1_epi8(15);
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(y, low)),
                                         _mm256_and_si256(_mm256_srli_epi16(y, 4), low), 1);
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));  /* low/high nibbles of b0, then of b1 */
}

static inline __attribute__((always_inline)) void scales64(const int qtype, const uint8_t *b0, const uint8_t *b1,
                                                           __m512 *scale, __m512 *offset) {
    uint32_t u0, u1;  /* d (and Q4_1's m) of each block */
    memcpy(&u0, b0, 4);
    memcpy(&u1, b1, 4);
    const __m512 v = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128((int)u0), (int)u1, 1)));
    *scale = _mm512_permutexvar_ps(_mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0), v);
    if (qtype == T_Q4_1) *offset = _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1), v);
    else *offset = _mm512_mul_ps(*scale, _mm512_set1_ps(qtype == T_Q4_0 ? -8.0f : -128.0f));
}

/* Q4_K / Q5_K / Q6_K: chunk j (64 weights) of the super-block at b. */
static inline __attribute__((always_inline)) __m512i k_chunk64(const int qtype, const uint8_t *b, int j,
                                                               __m512 *scale, __m512 *offset) {
    const __m512i nibble = _mm512_set1_epi8(15);
    if (qtype == T_Q6_K) {  /* 4 groups of 16, codes 0..63 from 4 low bits in ql and 2 high bits in qh */
        uint32_t sc4;
        memcpy(&sc4, b + 192 + 4 * j, 4);
        const __m128 s4 = _mm_mul_ps(_mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_cvtsi32_si128((int)sc4))),
                                     _mm_set1_ps(f16_to_float(b + 208)));
        *scale = _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                                       _mm512_castps128_ps512(s4));
        *offset = _mm512_mul_ps(*scale, _mm512_set1_ps(-32.0f));
        const int half = j / 2, upper = j % 2;  /* upper: the high nibbles, qh bits 4-7 */
        const __m512i ql = _mm512_loadu_si512(b + 64 * half);
        const __m512i low = _mm512_and_si512(upper ? _mm512_srli_epi16(ql, 4) : ql, nibble);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * half));
        const __m512i shifts = _mm512_inserti64x4(_mm512_set1_epi16((short)(4 * upper)),
                                                  _mm256_set1_epi16((short)(4 * upper + 2)), 1);
        const __m512i high = _mm512_and_si512(
            _mm512_srlv_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1), shifts), _mm512_set1_epi8(3));
        return _mm512_or_si512(low, _mm512_slli_epi16(high, 4));
    }
    int sc0, m0, sc1, m1;  /* sub-blocks 2j (lanes 0-7) and 2j + 1 (lanes 8-15) */
    scale_min_k4(b + 4, 2 * j, &sc0, &m0);
    scale_min_k4(b + 4, 2 * j + 1, &sc1, &m1);
    const float d = f16_to_float(b), dmin = f16_to_float(b + 2);
    *scale = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(d * (float)sc0), _mm512_set1_ps(d * (float)sc1));
    *offset = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(-(dmin * (float)m0)), _mm512_set1_ps(-(dmin * (float)m1)));
    const __m256i q = _mm256_loadu_si256((const __m256i *)(b + (qtype == T_Q4_K ? 16 : 48) + 32 * j));
    __m512i codes = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
    codes = _mm512_and_si512(codes, nibble);
    if (qtype == T_Q5_K) {  /* the fifth bit: bit 2j (2j + 1) of qh[i] for weight i of sub-block 2j (2j + 1) */
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 16));
        const __m512i shifts = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * j)),
                                                  _mm256_set1_epi16((short)(2 * j + 1)), 1);
        const __m512i bit = _mm512_and_si512(
            _mm512_srlv_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1), shifts), _mm512_set1_epi8(1));
        codes = _mm512_or_si512(codes, _mm512_slli_epi16(bit, 4));
    }
    return codes;
}

/* Half `half` of a Q4_G128 block: the low nibbles of its 64 code bytes (weights 0..63), or the high ones. */
static inline __attribute__((always_inline)) __m512i g128_chunk64(const uint8_t *b, int half, __m512 *scale,
                                                                  __m512 *offset) {
    const float d = f16_to_float(b);
    *scale = _mm512_set1_ps(d);
    *offset = _mm512_set1_ps(-((float)b[2] * d));  /* exact, as in decode_block */
    const __m512i v = _mm512_loadu_si512(b + 4);
    return _mm512_and_si512(half ? _mm512_srli_epi16(v, 4) : v, _mm512_set1_epi8(15));
}

/* Chunk t (64 weights) of a row: its codes, and its scales and offsets spread over the 16 lanes. */
static inline __attribute__((always_inline)) __m512i chunk64(const int qtype, const uint8_t *row, int64_t t,
                                                             int64_t blocks, int bytes, __m512 *scale, __m512 *offset) {
    if (qtype == T_Q4_G128) return g128_chunk64(row + t / 2 * bytes, (int)(t % 2), scale, offset);
    if (qtype == T_Q4_K || qtype == T_Q5_K || qtype == T_Q6_K)
        return k_chunk64(qtype, row + t / 4 * bytes, (int)(t % 4), scale, offset);
    /* a padding half block reads block b0 again and meets zero activations (codes, scales and sums are zero) */
    const uint8_t *b0 = row + 2 * t * bytes, *b1 = 2 * t + 1 < blocks ? b0 + bytes : b0;
    scales64(qtype, b0, b1, scale, offset);
    return codes64(qtype, b0, b1);
}

/* Weight row `row` (of `blocks` blocks) against activation rows acts[0 .. rows). */
static inline __attribute__((always_inline)) void direct_rows(const int qtype, const uint8_t *row, int64_t blocks,
                                                              int bytes, const Act *acts, const int rows, int64_t kp,
                                                              float *out) {
    __m512 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t t = 0; t < kp / CHUNK; t++) {
        __m512 scale, offset;
        const __m512i z = chunk64(qtype, row, t, blocks, bytes, &scale, &offset);
        for (int r = 0; r < rows; r++) {
            const __m512i s = dot64(z, _mm512_loadu_si512(acts[r].codes + t * CHUNK),
                                    _mm512_loadu_si512(acts[r].low + t * CHUNK));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(scale, _mm512_loadu_ps(acts[r].lane_scale + t * 16)),
                                     acc[r]);
            acc[r] = _mm512_fmadd_ps(offset, _mm512_loadu_ps(acts[r].lane_csum + t * 16), acc[r]);
        }
    }
    for (int r = 0; r < rows; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
}

static void direct_row(int qtype, const uint8_t *row, int64_t blocks, int bytes, const Act *acts, int rows,
                       int64_t kp, float *out) {
#define DIRECT(T)                                                                  \
    switch (rows) {  /* constant counts: the accumulators stay in registers */      \
        case 1: direct_rows(T, row, blocks, bytes, acts, 1, kp, out); return;       \
        case 2: direct_rows(T, row, blocks, bytes, acts, 2, kp, out); return;       \
        case 3: direct_rows(T, row, blocks, bytes, acts, 3, kp, out); return;       \
        default: direct_rows(T, row, blocks, bytes, acts, 4, kp, out); return;      \
    }
    switch (qtype) {
        case T_Q4_0: DIRECT(T_Q4_0)
        case T_Q4_1: DIRECT(T_Q4_1)
        case T_Q8_0: DIRECT(T_Q8_0)
        case T_Q4_K: DIRECT(T_Q4_K)
        case T_Q5_K: DIRECT(T_Q5_K)
        case T_Q4_G128: DIRECT(T_Q4_G128)
        default: DIRECT(T_Q6_K)
    }
#undef DIRECT
}
#endif

/* ---- the linear layer ---- */
typedef struct {
    DotFn dot;
    Format f;
    int qtype, dtype, out_dtype;
    const uint8_t *w;
    int64_t row_bytes;
    const uint8_t *acts;  /* m activation rows, act_bytes(kp) apart */
    const void *bias;
    void *out;
    int64_t m, n, k, kp;
} Job;

static Act act_at(const Job *job, int64_t r) {
    uint8_t *base = (uint8_t *)job->acts + (size_t)r * act_bytes(job->kp);
    const int64_t kp = job->kp;
    return (Act){(int8_t *)base, (int8_t *)(base + kp), (float *)(base + 2 * kp), (float *)(base + 3 * kp),
                 (float *)(base + 3 * kp + kp / 4)};
}

static void store(const Job *job, int64_t r, int64_t col, float y) {
    if (job->bias) y = y + load_x(job->bias, job->dtype, col);
    if (job->out_dtype) ((uint16_t *)job->out)[r * job->n + col] = float_to_bf16(y);
    else ((float *)job->out)[r * job->n + col] = y;
}

/* ---- prefill sizes with bf16 activations: weights widened to bf16, the bf16 vector kernel (vec_gemm.c) ----
 * A work item widens WIDE_N weight rows into vec_gemm.c's packed layout (per 16 rows, per pair of inputs, the 16
 * rows' pairs side by side) and runs vec_linear_bf16 on one thread over every activation row; the widening is
 * paid once per weight, the product runs at the bf16 kernel's speed (no activation quantization at all). */
#if defined(HAVE_VNNI512) && defined(__AVX512BF16__)
#define WIDE 1
#define WIDE_MIN_M 8  /* fewer rows: the direct / q8 paths are faster (measured, kernels/cpu_block_quant.py) */
#define WIDE_N 64      /* weight rows per work item: four 16-row panels */
#define PANEL_ROWS 16
int vec_gemm_best_isa(void);

/* Weight rows [n0, n0 + rows) → bf16 panels [ceil(rows/16)][k/2][16][2] (missing rows zero). */
static void widen_rows(const Job *job, int64_t n0, int rows, uint8_t *codes, float *s16, float *o16, uint32_t *panels) {
    const int64_t k = job->k, pairs = k / 2, npanels = (rows + PANEL_ROWS - 1) / PANEL_ROWS;
    memset(panels, 0, (size_t)(npanels * pairs * PANEL_ROWS) * 4);
    const Decoded d = {codes, s16, o16};
    for (int j = 0; j < rows; j++) {
        decode_row(job->qtype, job->f, job->w + (n0 + j) * job->row_bytes, k, k, d, 1);
        uint32_t *col = panels + (j / PANEL_ROWS) * pairs * PANEL_ROWS + j % PANEL_ROWS;
        for (int64_t g = 0; g < k / 16; g++) {
            const __m512 c = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(codes + 16 * g))));
            const __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_fmadd_ps(c, _mm512_set1_ps(s16[g]), _mm512_set1_ps(o16[g])));
            uint32_t two[8];
            _mm256_storeu_si256((__m256i *)two, h);
            for (int q = 0; q < 8; q++) col[(8 * g + q) * PANEL_ROWS] = two[q];
        }
    }
}

static int run_wide(const Job *job, const uint16_t *a, int nthreads) {
    const int64_t k = job->k, m = job->m, n = job->n, tiles = (n + WIDE_N - 1) / WIDE_N;
    const size_t out_elem = job->out_dtype ? 2 : 4;
    const size_t panel_bytes = (size_t)(WIDE_N * k * 2), out_bytes = (size_t)m * WIDE_N * out_elem;
    int failed = 0;
#pragma omp parallel num_threads(nthreads) if (tiles >= 2 * nthreads && nthreads > 1) reduction(| : failed)
    {
        uint8_t *scratch = aligned_alloc(64, (panel_bytes + out_bytes + (size_t)k * 2 + 63) / 64 * 64);
        failed = scratch == NULL;
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tiles; t++) {
            if (!scratch) continue;
            const int64_t n0 = t * WIDE_N;
            const int rows = n - n0 < WIDE_N ? (int)(n - n0) : WIDE_N;
            uint32_t *panels = (uint32_t *)scratch;
            uint8_t *tile_out = scratch + panel_bytes;
            uint8_t *codes = scratch + panel_bytes + out_bytes;
            float s16[MAX_K / 16], o16[MAX_K / 16];
            widen_rows(job, n0, rows, codes, s16, o16, panels);
            const uint16_t *bias = job->bias ? (const uint16_t *)job->bias + n0 : NULL;
            failed |= vec_linear_bf16(a, (const uint16_t *)panels, bias, tile_out, m, rows, k, 3, job->out_dtype, 1);
            for (int64_t r = 0; r < m; r++)
                memcpy((char *)job->out + (r * n + n0) * out_elem, tile_out + r * rows * out_elem, rows * out_elem);
        }
        free(scratch);
    }
    return failed;
}
#endif

/* Work item `t`: weight rows [TILE_N t, TILE_N t + TILE_N) decoded into `scratch`, then every activation row. */
static void run_tile(const Job *job, int64_t t, uint8_t *scratch) {
    const int64_t n0 = t * TILE_N, kp = job->kp;
    const int nt = job->n - n0 < TILE_N ? (int)(job->n - n0) : TILE_N;
    Decoded rows[TILE_N];
    for (int j = 0; j < nt; j++) {
        rows[j] = decoded_at(scratch + (size_t)j * decoded_bytes(kp), kp);
        decode_for_dot(job->qtype, job->f, job->w + (n0 + j) * job->row_bytes, job->k, kp, rows[j]);
    }
    float y[4];
    for (int64_t r = 0; r < job->m; r++) {
        const Act a = act_at(job, r);
        for (int j = 0; j < nt; j += 4) {
            const int nw = nt - j < 4 ? nt - j : 4;
            job->dot(&a, rows + j, nw, kp, y);
            for (int i = 0; i < nw; i++) store(job, r, n0 + j + i, y[i]);
        }
    }
}

#if defined(HAVE_VNNI512)
/* Work item `t` of the direct path: weight rows [TILE_N t, TILE_N t + TILE_N), 4 activation rows at a time. */
static void run_direct(const Job *job, int64_t t) {
    const int64_t n0 = t * TILE_N, n1 = job->n - n0 < TILE_N ? job->n : n0 + TILE_N;
    Act acts[4];
    float y[4];
    for (int64_t r0 = 0; r0 < job->m; r0 += 4) {
        const int rows = job->m - r0 < 4 ? (int)(job->m - r0) : 4;
        for (int r = 0; r < rows; r++) acts[r] = act_at(job, r0 + r);
        for (int64_t col = n0; col < n1; col++) {
            direct_row(job->qtype, job->w + col * job->row_bytes, job->k / job->f.block, job->f.bytes, acts, rows,
                       job->kp, y);
            for (int r = 0; r < rows; r++) store(job, r0 + r, col, y[r]);
        }
    }
}
#endif

/* out [m, n] (out_dtype 0 fp32, 1 bf16) = a [m, k] (rows `lda` elements apart; dtype 0 fp32, 1 bf16) times the
 * GGML `qtype` weight w [n, row_bytes] (+ bias [n] in a's dtype, or NULL). */
int bq_linear(const void *a, int64_t lda, const uint8_t *w, int64_t row_bytes, int qtype, const void *bias, void *out,
              int64_t m, int64_t n, int64_t k, int dtype, int out_dtype, int isa, int nthreads) {
    Format f;
    if (format_of(qtype, &f) || m <= 0 || n <= 0 || k <= 0 || k > MAX_K || k % f.block || lda < k
        || row_bytes != k / f.block * f.bytes || (dtype != 0 && dtype != 1)
        || (out_dtype != 0 && out_dtype != 1) || isa < 0 || isa > bq_best_isa())
        return 1;
    const int64_t kp = (k + CHUNK - 1) / CHUNK * CHUNK, tiles = (n + TILE_N - 1) / TILE_N;
#if defined(WIDE)
    if (dtype == 1 && isa >= ISA_AVX512_VNNI && m >= WIDE_MIN_M && lda == k && vec_gemm_best_isa() >= 3) {
        const Job job = {NULL, f, qtype, dtype, out_dtype, w, row_bytes, NULL, bias, out, m, n, k, kp};
        return run_wide(&job, a, nthreads) ? 2 : 0;
    }
#endif
    uint8_t *acts = aligned_alloc(64, ((size_t)m * act_bytes(kp) + 63) / 64 * 64);
    if (!acts) return 2;
    Job job = {dot_for(isa), f, qtype, dtype, out_dtype, w, row_bytes, acts, bias, out, m, n, k, kp};
    const size_t elem = dtype ? 2 : 4;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (m >= 32)
    for (int64_t r = 0; r < m; r++) quantize_act((const char *)a + r * lda * elem, dtype, k, kp, act_at(&job, r));
    int failed = 0;
#if defined(HAVE_VNNI512)
    if (isa >= ISA_AVX512_VNNI && m <= DIRECT_MAX_M) {
#pragma omp parallel for num_threads(nthreads) schedule(static) if (tiles >= 2 * nthreads && nthreads > 1)
        for (int64_t t = 0; t < tiles; t++) run_direct(&job, t);
        free(acts);
        return 0;
    }
#endif
    const size_t scratch_bytes = ((size_t)TILE_N * decoded_bytes(kp) + 63) / 64 * 64;
    /* Few tiles (a small layer at decode) are not worth waking a second thread for. */
#pragma omp parallel num_threads(nthreads) if (tiles >= 2 * nthreads && nthreads > 1) reduction(| : failed)
    {
        uint8_t *scratch = aligned_alloc(64, scratch_bytes);
        failed = scratch == NULL;
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tiles; t++)
            if (scratch) run_tile(&job, t, scratch);
        free(scratch);
    }
    free(acts);
    return failed ? 2 : 0;
}

/* out [count, k] (dtype 0 fp32, 1 bf16) = rows ids[i] of the GGML `qtype` table w [num_rows, row_bytes],
 * dequantized exactly as the reference does. */
int bq_embedding(void *out, const uint8_t *w, int64_t row_bytes, int qtype, const int64_t *ids, int64_t count,
                 int64_t k, int64_t num_rows, int dtype, int nthreads) {
    Format f;
    if (format_of(qtype, &f) || k <= 0 || k > MAX_K || k % f.block || row_bytes != k / f.block * f.bytes
        || (dtype != 0 && dtype != 1))
        return 1;
    for (int64_t i = 0; i < count; i++)
        if (ids[i] < 0 || ids[i] >= num_rows) return 3;
    int failed = 0;
#pragma omp parallel num_threads(nthreads) if (count >= 64 && nthreads > 1) reduction(| : failed)
    {
        uint8_t *codes = malloc((size_t)k + (size_t)k / 2);  /* codes [k], scales and offsets [k/16] each */
        failed = codes == NULL;
        float *s16 = (float *)(codes + k), *o16 = s16 + k / 16;
        const Decoded d = {codes, s16, o16};
#pragma omp for schedule(static)
        for (int64_t i = 0; i < count; i++) {
            if (!codes) continue;
            decode_row(qtype, f, w + ids[i] * row_bytes, k, k, d, 1);
            for (int64_t e = 0; e < k; e++) {
                const int64_t g = e / 16;
                const float v = f.zero >= 0 ? s16[g] * (float)((int)codes[e] - f.zero) : s16[g] * (float)codes[e] + o16[g];
                if (dtype) ((uint16_t *)out)[i * k + e] = float_to_bf16(v);
                else ((float *)out)[i * k + e] = v;
            }
        }
        free(codes);
    }
    return failed ? 2 : 0;
}
