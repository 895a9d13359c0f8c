// Attention over keys and values packed for VDPBF16PS (AVX512_BF16, head size 64 or 128): the layouts, the packing
// from the paged pool, and a block of queries attending to them. Used by prefill / extend (vec_extend.c) and by the
// shared prefixes of decode groups (vec_attention.c).
//
// Keys go 16 at a time by pairs of dimensions (one instruction adds a dimension pair's products for 16 keys), values
// two keys at a time (one instruction adds two keys' values times their softmax weights, which are rounded to bf16
// as torch's CPU flash attention rounds them): no reduction across lanes anywhere. Attending the pool rows in place
// took one dot product per key reduced across lanes and fp32 multiply-adds for the values, twice the instructions.
#ifndef SPRIG_PACKED_KV_H
#define SPRIG_PACKED_KV_H
#ifdef __AVX512BF16__
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bf16.h"
#include "decode_vec.h"
#include "kv_quant.h"

#define KEY_BLOCK 16  // keys per packed key vector
#define CHUNK_KEYS 64  // keys per softmax update (4 key blocks); packed keys are padded to a multiple of it
#define QUERY_REGS 16  // a query block's accumulators: 4 key blocks of scores or NV value vectors per query
#define MAX_HEAD 128

// Where one kv head's rows are in the pool: bf16 rows, or (kv_dtype 3-5, kv_quant.h) one-byte codes with a bf16
// scale per (slot, kv head).
typedef struct {
    const char *rows;  // the kv head's first element
    size_t slot_stride;  // bytes between slots
    int kv_dtype;  // 1: bf16; else a code kind
    const uint16_t *scales;  // the kv head's scale of slot 0 (codes only), Hkv apart
    int64_t Hkv;
} KVHead;

// Row `slot` of a kv head as D bf16 values: as stored, or each code times its row's scale rounded to bf16 (as
// kv_quant.dequantize_kv writes it, so a token sees the keys torch would).
static inline void load_row_bf16(uint16_t *dst, const KVHead *kv, int64_t slot, int64_t D) {
    const char *src = kv->rows + (size_t)slot * kv->slot_stride;
    if (!kv_quantized(kv->kv_dtype)) {
        memcpy(dst, src, (size_t)D * 2);
        return;
    }
    const __m512 scale = _mm512_set1_ps(bf16_to_float(kv->scales[slot * kv->Hkv]) * KV_UNIT(kv->kv_dtype));
    for (int64_t i = 0; i < D; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtepi32_epi16(bf16_bits(_mm512_mul_ps(load16_codes(src + i, kv->kv_dtype), scale))));
}

// Keys [0, len) of one kv head as KEY_BLOCK x (D / 2) pairs: kt[(b * D / 2 + dp) * 16 + l] is dimension pair dp of
// key 16 b + l; keys past len (to the padded length) are 0.
static void pack_keys(uint32_t *kt, const KVHead *kv, const int64_t *pages, int64_t len, int64_t padded,
                      int64_t page_size, int64_t D) {
    const int64_t DP = D / 2;
    uint32_t rows[KEY_BLOCK][MAX_HEAD / 2] __attribute__((aligned(64)));
    int64_t slots[KEY_BLOCK];
    const __m512i lane_rows = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(MAX_HEAD / 2));
    for (int64_t t0 = 0; t0 < padded; t0 += KEY_BLOCK) {
        const int64_t n = len - t0 < KEY_BLOCK ? (len - t0 > 0 ? len - t0 : 0) : KEY_BLOCK;
        chunk_slots(pages, page_size, t0, n, slots);
        for (int64_t l = 0; l < KEY_BLOCK; l++) {
            if (l < n)
                load_row_bf16((uint16_t *)rows[l], kv, slots[l], D);
            else
                memset(rows[l], 0, (size_t)D * 2);
        }
        uint32_t *dst = kt + t0 * DP;
        for (int64_t dp = 0; dp < DP; dp++)
            _mm512_store_si512(dst + dp * 16,
                               _mm512_i32gather_epi32(_mm512_add_epi32(lane_rows, _mm512_set1_epi32((int)dp)), rows, 4));
    }
}

// Values [0, len) of one kv head as pairs of keys: vp[(p * NV + i) * 16 + l] holds dimension 16 i + l of keys 2 p
// (low half) and 2 p + 1 (high half); keys past len are 0.
static void pack_values(uint32_t *vp, const KVHead *kv, const int64_t *pages, int64_t len, int64_t padded,
                        int64_t page_size, int64_t D) {
    const int64_t NV = D / 16;
    int64_t slots[2];
    uint16_t rows[2][MAX_HEAD] __attribute__((aligned(64)));
    for (int64_t t = 0; t < padded; t += 2) {
        const int64_t n = len - t < 2 ? (len - t > 0 ? len - t : 0) : 2;
        chunk_slots(pages, page_size, t, n, slots);
        for (int64_t r = 0; r < 2; r++) {
            if (r < n)
                load_row_bf16(rows[r], kv, slots[r], D);
            else
                memset(rows[r], 0, (size_t)D * 2);
        }
        uint32_t *dst = vp + t / 2 * NV * 16;
        for (int64_t i = 0; i < NV; i++) {
            const __m256i a = _mm256_load_si256((const __m256i *)(rows[0] + i * 16));
            const __m256i b = _mm256_load_si256((const __m256i *)(rows[1] + i * 16));
            _mm512_store_si512(dst + i * 16, _mm512_or_si512(_mm512_cvtepu16_epi32(a),
                                                             _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)));
        }
    }
}

// QB queries (bf16 rows, D = 16 * NV; a block of fewer repeats its last query) attend to packed keys [0, lims[k]):
// scores of 4 key blocks per query in registers, an online softmax a chunk at a time, value sums in registers.
// Writes each query's normalized output as bf16 into out16[k], or (out16 NULL) as fp32 into out32[k] with its
// log-sum-exp in *lses[k].
static inline __attribute__((always_inline)) void attend_packed(
    const uint32_t *const *qs, const int64_t *lims, int64_t len, const uint32_t *kt, const uint32_t *vp, float scale,
    uint16_t *const *out16, float *const *out32, float *const *lses, const int NV, const int QB) {
    const int DP = NV * 8;
    __m512 acc[QUERY_REGS], sc[QUERY_REGS];
    float s[QUERY_REGS / 4][CHUNK_KEYS] __attribute__((aligned(64))), m[QUERY_REGS / 4], l[QUERY_REGS / 4];
    uint32_t pp[QUERY_REGS / 4][CHUNK_KEYS / 2] __attribute__((aligned(64)));
    const __m512 sc_scale = _mm512_set1_ps(scale);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int k = 0; k < QB; k++) {
        for (int i = 0; i < NV; i++) acc[k * NV + i] = _mm512_setzero_ps();
        m[k] = -INFINITY;
        l[k] = 0.0f;
    }
    for (int64_t t0 = 0; t0 < len; t0 += CHUNK_KEYS) {
        for (int r = 0; r < 4 * QB; r++) sc[r] = _mm512_setzero_ps();
        const uint32_t *kc = kt + t0 * DP;
        for (int dp = 0; dp < DP; dp++) {
            __m512bh kb[4];
            for (int b = 0; b < 4; b++) kb[b] = (__m512bh)_mm512_load_si512(kc + (b * DP + dp) * 16);
            for (int k = 0; k < QB; k++) {
                const __m512bh qb = (__m512bh)_mm512_set1_epi32((int)qs[k][dp]);
                for (int b = 0; b < 4; b++) sc[k * 4 + b] = _mm512_dpbf16_ps(sc[k * 4 + b], kb[b], qb);
            }
        }
        for (int k = 0; k < QB; k++) {
            __m512 mx = _mm512_set1_ps(m[k]);
            for (int b = 0; b < 4; b++) {  // e^-inf = 0 past this query's own keys (a causal limit)
                const __mmask16 past = _mm512_cmpge_epi32_mask(
                    _mm512_add_epi32(lane, _mm512_set1_epi32((int)(t0 + b * 16))), _mm512_set1_epi32((int)lims[k]));
                const __m512 x = _mm512_mask_mov_ps(_mm512_mul_ps(sc[k * 4 + b], sc_scale), past,
                                                    _mm512_set1_ps(-INFINITY));
                _mm512_store_ps(&s[k][b * 16], x);
                mx = _mm512_max_ps(mx, x);
            }
            const float new_m = _mm512_reduce_max_ps(mx);
            __m512 sum = _mm512_setzero_ps();
            __m512 e[4];
            for (int b = 0; b < 4; b++) {
                e[b] = exp16(_mm512_sub_ps(_mm512_load_ps(&s[k][b * 16]), _mm512_set1_ps(new_m)));
                sum = _mm512_add_ps(sum, e[b]);
            }
            for (int h = 0; h < 2; h++)  // the weights as bf16 pairs of keys (2 p, 2 p + 1)
                _mm512_store_si512(&pp[k][h * 16], (__m512i)_mm512_cvtne2ps_pbh(e[2 * h + 1], e[2 * h]));
            const float c = m[k] == -INFINITY ? 0.0f : expf(m[k] - new_m);
            l[k] = l[k] * c + _mm512_reduce_add_ps(sum);
            m[k] = new_m;
            for (int i = 0; i < NV; i++) acc[k * NV + i] = _mm512_mul_ps(acc[k * NV + i], _mm512_set1_ps(c));
        }
        const uint32_t *vc = vp + t0 / 2 * NV * 16;
        for (int p = 0; p < CHUNK_KEYS / 2; p++) {
            __m512bh v[MAX_HEAD / 16];
            for (int i = 0; i < NV; i++) v[i] = (__m512bh)_mm512_load_si512(vc + (p * NV + i) * 16);
            for (int k = 0; k < QB; k++) {
                const __m512bh w = (__m512bh)_mm512_set1_epi32((int)pp[k][p]);
                for (int i = 0; i < NV; i++) acc[k * NV + i] = _mm512_dpbf16_ps(acc[k * NV + i], v[i], w);
            }
        }
    }
    for (int k = 0; k < QB; k++) {
        const __m512 inv = _mm512_set1_ps(1.0f / l[k]);
        for (int i = 0; i < NV; i++) {
            const __m512 o = _mm512_mul_ps(acc[k * NV + i], inv);
            if (out16)
                _mm256_storeu_si256((__m256i *)(out16[k] + i * 16), _mm512_cvtepi32_epi16(bf16_bits(o)));
            else
                _mm512_storeu_ps(out32[k] + i * 16, o);
        }
        if (!out16) *lses[k] = m[k] + logf(l[k]);
    }
}

// Keys padded to a whole number of softmax chunks (what the packed rows hold).
static inline int64_t packed_keys(int64_t len) { return (len + CHUNK_KEYS - 1) / CHUNK_KEYS * CHUNK_KEYS; }

// Pack keys and values [0, len) of one kv head into kt: the keys, then at kt + padded * D / 2 the values; padded * D
// 32-bit words in all.
static inline void pack_kv(uint32_t *kt, const KVHead *k, const KVHead *v, const int64_t *pages, int64_t len,
                           int64_t page_size, int64_t D) {
    const int64_t padded = packed_keys(len);
    pack_keys(kt, k, pages, len, padded, page_size, D);
    pack_values(kt + padded * D / 2, v, pages, len, padded, page_size, D);
}
#endif
#endif
