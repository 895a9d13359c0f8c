// Decode attention that reads keys and values in place from the paged KV pool (CPU, OpenMP).
//
// The torch reference gathers every sequence's pages into a padded copy before attending; on a CPU that copy
// runs at a fraction of memory bandwidth and dominates a large decode batch. Here each (sequence, kv head) pair
// walks its page table once, page by page, with an online softmax, so K and V are each read exactly once.
//
// Shapes (all contiguous): q [B, Hq, D]; k_cache, v_cache [num_slots, Hkv, D]; pages [B, max_pages] int64;
// lens [B] int64 (keys per sequence, >= 1); out [B, Hq, D]. Hq = G * Hkv (GQA). dtype: 0 fp32, 1 bf16, 2 fp16.
// The pool holds `dtype` too, or one-byte codes (kv_dtype 3 int8, 4 fp8 e4m3, 5 fp8 e5m2; kv_quant.h) with a bf16
// scale per (slot, kv head) in k_scale / v_scale [num_slots, Hkv]: a key's scale multiplies its score, a value's
// its softmax weight, so the codes are widened but never scaled element by element.
//
// Rows that share leading pages through the radix tree are attended in groups: their shared keys once per group,
// as matrix products on AMX (amx_attention.c, for the groups the caller passes) or on vector units for the groups
// found here (vec_attention.c); each row then walks only its own pages and merges the two parts by
// log-sum-exp.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "amx_attention.h"
#include "decode_vec.h"
#include "vec_attention.h"
#include "kernels.h"
#include "kv_quant.h"

#define MAX_GROUP 32
#define MAX_QHEADS 64  // query heads one call of the vector path takes (its accumulators live on the stack)

// Copy n elements of type `dtype` at `src` into floats.
static inline void load_row(float *dst, const void *src, int64_t n, int dtype) {
    if (dtype == 0) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dtype == 1) {
        const uint16_t *s = (const uint16_t *)src;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_float(s[i]);
    } else {
        const _Float16 *s = (const _Float16 *)src;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dst[i] = (float)s[i];
    }
}

// A key or value row of the pool as floats: `dtype` elements as they are, or codes times their scale.
static inline void load_kv_row(float *dst, const void *src, int64_t n, int kv_dtype, float scale) {
    if (!kv_quantized(kv_dtype)) {
        load_row(dst, src, n, kv_dtype);
        return;
    }
    for (int64_t i = 0; i < n; i++) dst[i] = kv_code_to_float((const uint8_t *)src, i, kv_dtype) * scale;
}

// The scale of row `slot` of a quantized pool's head (scales points at that head's column), else 1.
static inline float kv_scale(const uint16_t *scales, int64_t slot, int64_t Hkv) {
    return scales ? bf16_to_float(scales[slot * Hkv]) : 1.0f;
}

static inline void store_row(void *dst, const float *src, int64_t n, int dtype) {
    if (dtype == 0) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dtype == 1) {
        uint16_t *d = (uint16_t *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = float_to_bf16(src[i]);
    } else {
        _Float16 *d = (_Float16 *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = (_Float16)src[i];
    }
}

// row holds a sequence's unnormalized output over its own keys (running max m, sum l); normalize it, first
// merging in `shared` (the normalized output over its group's shared keys, log-sum-exp *shared_lse) if given.
static inline void finish_row(float *row, int64_t D, float m, float l, const float *shared, const float *shared_lse) {
    if (!shared) {
        const float inv = 1.0f / l;
        for (int64_t d = 0; d < D; d++) row[d] *= inv;
        return;
    }
    const float top = m > *shared_lse ? m : *shared_lse;
    const float w_own = expf(m - top), w_shared = expf(*shared_lse - top);
    const float inv = 1.0f / (l * w_own + w_shared);
    for (int64_t d = 0; d < D; d++) row[d] = (row[d] * w_own + shared[d] * w_shared) * inv;
}

// One sequence, one kv head: its G query heads attend to `len` keys spread over `pages`. Keys are scored a chunk
// at a time so the softmax rescale and the exponentials run once per chunk, over contiguous scores.
static void attend_one(const void *q, const void *k_cache, const void *v_cache, void *out, const int64_t *pages,
                       int64_t begin, int64_t len, int64_t G, int64_t Hkv, int64_t D, int64_t page_size,
                       float scale, int dtype, size_t esize, const float *shared, const float *shared_lse,
                       int kv_dtype, const uint16_t *k_scale, const uint16_t *v_scale) {
    float qf[MAX_GROUP][MAX_DIM], acc[MAX_GROUP][MAX_DIM], row[MAX_DIM];
    float s[MAX_GROUP][CHUNK], m[MAX_GROUP], l[MAX_GROUP];
    int64_t slots[CHUNK];
    for (int64_t g = 0; g < G; g++) {
        load_row(qf[g], (const char *)q + (size_t)(g * D) * esize, D, dtype);
        for (int64_t d = 0; d < D; d++) qf[g][d] *= scale;
        memset(acc[g], 0, (size_t)D * sizeof(float));
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    const size_t slot_stride = (size_t)(Hkv * D) * (kv_quantized(kv_dtype) ? 1 : esize);
    for (int64_t t0 = begin; t0 < len; t0 += CHUNK) {
        const int64_t n = len - t0 < CHUNK ? len - t0 : CHUNK;
        chunk_slots(pages, page_size, t0, n, slots);
        for (int64_t j = 0; j < n; j++) {
            load_kv_row(row, (const char *)k_cache + (size_t)slots[j] * slot_stride, D, kv_dtype,
                        kv_scale(k_scale, slots[j], Hkv));
            for (int64_t g = 0; g < G; g++) {
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (int64_t d = 0; d < D; d++) dot += qf[g][d] * row[d];
                s[g][j] = dot;
            }
        }
        for (int64_t g = 0; g < G; g++) {
            float mx = m[g];
            for (int64_t j = 0; j < n; j++) mx = s[g][j] > mx ? s[g][j] : mx;
            const float c = expf(m[g] - mx);  // rescale what earlier chunks accumulated (0 on the first)
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < n; j++) {
                s[g][j] = expf(s[g][j] - mx);
                sum += s[g][j];
            }
            l[g] = l[g] * c + sum;
            m[g] = mx;
#pragma omp simd
            for (int64_t d = 0; d < D; d++) acc[g][d] *= c;
        }
        for (int64_t j = 0; j < n; j++) {
            load_kv_row(row, (const char *)v_cache + (size_t)slots[j] * slot_stride, D, kv_dtype,
                        kv_scale(v_scale, slots[j], Hkv));
            for (int64_t g = 0; g < G; g++) {
                const float p = s[g][j];
#pragma omp simd
                for (int64_t d = 0; d < D; d++) acc[g][d] += p * row[d];
            }
        }
    }
    for (int64_t g = 0; g < G; g++) {
        finish_row(acc[g], D, m[g], l[g], shared ? shared + g * D : NULL, shared ? shared_lse + g : NULL);
        store_row((char *)out + (size_t)(g * D) * esize, acc[g], D, dtype);
    }
}

#ifdef __AVX512F__
#include "decode_vec.h"
// Scaled scores of a chunk's n keys stored as codes (qv holds the queries times the softmax scale), 16 keys at
// a time: each key is widened once and dotted with all G query heads of its kv head, the 16 partial vectors of a
// query head are reduced by sum16, and each key's own scale multiplies its lane. Lanes past n repeat key 0 and
// are overwritten with -inf by the caller.
static inline __attribute__((always_inline)) void scores_codes(
    __m512 qv[][MAX_DIM / 16], const void *k_cache, const uint16_t *k_scale, const int64_t *slots, int64_t n,
    int64_t H, int64_t G, int64_t Hkv, size_t slot_stride, size_t head_bytes, int kv_dtype, const int NV,
    float s[][CHUNK]) {
    float ks[CHUNK] __attribute__((aligned(64)));
    __m512 d[MAX_GROUP][16];
    for (int64_t h = 0; h < H; h++) {
        for (int64_t j = 0; j < CHUNK; j++)
            ks[j] = j < n ? bf16_to_float(k_scale[slots[j] * Hkv + h]) * KV_UNIT(kv_dtype) : 0.0f;
        for (int64_t j0 = 0; j0 < n; j0 += 16) {
            for (int j = 0; j < 16; j++) {
                const int64_t slot = slots[j0 + j < n ? j0 + j : 0];
                const char *kp = (const char *)k_cache + (size_t)slot * slot_stride + h * head_bytes;
                __m512 kr[MAX_DIM / 16];
                for (int i = 0; i < NV; i++) kr[i] = load16_codes(kp + i * 16, kv_dtype);
                for (int64_t g = 0; g < G; g++) {
                    const int64_t qh = h * G + g;
                    __m512 acc = _mm512_mul_ps(qv[qh][0], kr[0]);
                    for (int i = 1; i < NV; i++) acc = _mm512_fmadd_ps(qv[qh][i], kr[i], acc);
                    d[g][j] = acc;
                }
            }
            const __m512 scales = _mm512_load_ps(&ks[j0]);
            for (int64_t g = 0; g < G; g++) _mm512_store_ps(&s[h * G + g][j0], _mm512_mul_ps(sum16(d[g]), scales));
        }
    }
}

#ifdef __AVX512BF16__

// Scaled bf16 scores of a chunk's n keys for query heads [0, H * G): q . k on bf16 pairs with fp32 accumulation
// (VDPBF16PS reads the keys as stored, no conversion), 16 keys at a time; lanes past n repeat key 0 and are
// overwritten with -inf by the caller.
static inline __attribute__((always_inline)) void scores_bf16(
    const void *q, const void *k_cache, const int64_t *slots, int64_t n, int64_t H, int64_t G, size_t slot_stride,
    size_t head_bytes, float scale, const int NV, float s[][CHUNK]) {
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t h = 0; h < H; h++) {
        for (int64_t g = 0; g < G; g++) {
            const int64_t qh = h * G + g;
            __m512bh qb[MAX_DIM / 32];
            for (int i = 0; i < NV / 2; i++)
                qb[i] = (__m512bh)_mm512_loadu_si512((const char *)q + (size_t)qh * head_bytes + (size_t)i * 64);
            for (int64_t j0 = 0; j0 < n; j0 += 16) {
                __m512 d[16];
                for (int j = 0; j < 16; j++) {
                    const int64_t slot = slots[j0 + j < n ? j0 + j : 0];
                    const char *kp = (const char *)k_cache + (size_t)slot * slot_stride + h * head_bytes;
                    d[j] = _mm512_dpbf16_ps(_mm512_setzero_ps(), qb[0], (__m512bh)_mm512_loadu_si512(kp));
                    for (int i = 1; i < NV / 2; i++)
                        d[j] = _mm512_dpbf16_ps(d[j], qb[i], (__m512bh)_mm512_loadu_si512(kp + (size_t)i * 64));
                }
                _mm512_store_ps(&s[qh][j0], _mm512_mul_ps(sum16(d), sc));
            }
        }
    }
}

// scores_codes for bf16 queries: each key's codes widened once to bf16 pairs (exact: every int8 and fp8 value is a
// bf16) and dotted with the G query heads on VDPBF16PS, half the multiply-adds of the fp32 path. q is unscaled.
static inline __attribute__((always_inline)) void scores_codes_bf16(
    const void *q, const void *k_cache, const uint16_t *k_scale, const int64_t *slots, int64_t n, int64_t H,
    int64_t G, int64_t Hkv, size_t slot_stride, size_t head_bytes, int kv_dtype, float scale, const int NV,
    float s[][CHUNK]) {
    float ks[CHUNK] __attribute__((aligned(64)));
    __m512 d[MAX_GROUP][16];
    const size_t q_head_bytes = (size_t)(NV * 16) * 2;
    for (int64_t h = 0; h < H; h++) {
        for (int64_t j = 0; j < CHUNK; j++)
            ks[j] = j < n ? bf16_to_float(k_scale[slots[j] * Hkv + h]) * KV_UNIT(kv_dtype) * scale : 0.0f;
        for (int64_t j0 = 0; j0 < n; j0 += 16) {
            for (int j = 0; j < 16; j++) {
                const int64_t slot = slots[j0 + j < n ? j0 + j : 0];
                const char *kp = (const char *)k_cache + (size_t)slot * slot_stride + h * head_bytes;
                __m512bh kb[MAX_DIM / 32];
                for (int i = 0; i < NV / 2; i++)
                    kb[i] = _mm512_cvtne2ps_pbh(load16_codes(kp + i * 32 + 16, kv_dtype),
                                                load16_codes(kp + i * 32, kv_dtype));
                for (int64_t g = 0; g < G; g++) {
                    const char *qp = (const char *)q + (size_t)(h * G + g) * q_head_bytes;
                    __m512 acc = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)_mm512_loadu_si512(qp), kb[0]);
                    for (int i = 1; i < NV / 2; i++)
                        acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(qp + (size_t)i * 64), kb[i]);
                    d[g][j] = acc;
                }
            }
            const __m512 scales = _mm512_load_ps(&ks[j0]);
            for (int64_t g = 0; g < G; g++) _mm512_store_ps(&s[h * G + g][j0], _mm512_mul_ps(sum16(d[g]), scales));
        }
    }
}
#endif

#define VALUE_REGS 24  // value sums held in registers: 6 query heads of size 64, 3 of size 128

// acc[k] += sum_j s[k][j] * value_j for GB query heads of one kv head over a chunk's n values (each value row
// widened once for all GB heads), the GB * NV sums held in registers for the whole chunk: accumulating in
// memory would put a store and a reload on every multiply-add. `vh` points at the kv head's first value.
static inline __attribute__((always_inline)) void values_block(
    __m512 acc[][MAX_DIM / 16], float s[][CHUNK], const char *vh, const int64_t *slots, int64_t n,
    size_t slot_stride, int dtype, size_t esize, int quant, int kv_dtype, Prefetcher *pf, int pf_lines,
    const int GB, const int NV) {
    __m512 a[VALUE_REGS];  // GB * NV of them; a fixed size (not GB * NV) so that they can live in registers
    for (int k = 0; k < GB; k++)
        for (int i = 0; i < NV; i++) a[k * NV + i] = acc[k][i];
    for (int64_t j = 0; j < n; j++) {
        prefetch_some(pf, pf_lines);
        const char *vp = vh + (size_t)slots[j] * slot_stride;
        __m512 vr[MAX_DIM / 16];
        for (int i = 0; i < NV; i++)
            vr[i] = quant ? load16_codes(vp + i * 16, kv_dtype) : load16(vp + (size_t)(i * 16) * esize, dtype);
        for (int k = 0; k < GB; k++) {
            const __m512 p = _mm512_set1_ps(s[k][j]);
            for (int i = 0; i < NV; i++) a[k * NV + i] = _mm512_fmadd_ps(p, vr[i], a[k * NV + i]);
        }
    }
    for (int k = 0; k < GB; k++)
        for (int i = 0; i < NV; i++) acc[k][i] = a[k * NV + i];
}

// values_block for the G query heads of kv head h, in blocks whose sums fit the registers (VALUE_REGS / NV heads).
static inline __attribute__((always_inline)) void values_head(
    __m512 acc[][MAX_DIM / 16], float s[][CHUNK], const char *vh, const int64_t *slots, int64_t n,
    size_t slot_stride, int dtype, size_t esize, int quant, int kv_dtype, Prefetcher *pf, int pf_lines, int64_t G,
    const int NV) {
    const int64_t per = VALUE_REGS / NV;
    for (int64_t g0 = 0; g0 < G; g0 += per) {
        const int64_t gb = G - g0 < per ? G - g0 : per;
        __m512(*ak)[MAX_DIM / 16] = acc + g0;
        float(*sk)[CHUNK] = s + g0;
#define VALUES_CASE(B) \
    case B: values_block(ak, sk, vh, slots, n, slot_stride, dtype, esize, quant, kv_dtype, pf, pf_lines, B, NV); break;
        switch (gb) {
            VALUES_CASE(1)
            VALUES_CASE(2)
            VALUES_CASE(3)
            VALUES_CASE(4)
            VALUES_CASE(5)
            default:
                values_block(ak, sk, vh, slots, n, slot_stride, dtype, esize, quant, kv_dtype, pf, pf_lines, 6, NV);
        }
#undef VALUES_CASE
    }
}

// Query heads [0, H * G) of one sequence attend to their H kv heads (adjacent in each pool slot), D = 16 * NV.
// Taking all of a sequence's heads in one pass reads each slot's keys and values as one contiguous run (the
// pool stores a slot's heads side by side), which DRAM serves far better than one head's slice per pass.
// Dot products reduce with a shuffle tree, exponentials run 16 at a time; inlined per NV so loops unroll.
static inline __attribute__((always_inline)) void attend_avx512(
    const void *q, const void *k_cache, const void *v_cache, void *out, const int64_t *pages, int64_t begin,
    int64_t len, int64_t H, int64_t G, int64_t Hkv, int64_t page_size, float scale, int dtype, size_t esize,
    const float *shared, const float *shared_lse, int kv_dtype, const uint16_t *k_scale, const uint16_t *v_scale,
    const int NV) {
    const int64_t QH = H * G;
    __m512 qv[MAX_QHEADS][MAX_DIM / 16], acc[MAX_QHEADS][MAX_DIM / 16];
    float s[MAX_QHEADS][CHUNK] __attribute__((aligned(64))), m[MAX_QHEADS], l[MAX_QHEADS];
    int64_t slots[2 * CHUNK];
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t qh = 0; qh < QH; qh++) {
        for (int i = 0; i < NV; i++) {
            qv[qh][i] = _mm512_mul_ps(load16((const char *)q + (size_t)(qh * NV * 16 + i * 16) * esize, dtype), sc);
            acc[qh][i] = _mm512_setzero_ps();
        }
        m[qh] = -INFINITY;
        l[qh] = 0.0f;
    }
    const int quant = kv_quantized(kv_dtype);
    const size_t kes = quant ? 1 : esize;
    const size_t slot_stride = (size_t)(Hkv * NV * 16) * kes, head_bytes = (size_t)(NV * 16) * kes;
    const size_t run_bytes = (size_t)H * head_bytes;
    for (int64_t t0 = begin; t0 < len; t0 += CHUNK) {
        const int64_t n = len - t0 < CHUNK ? len - t0 : CHUNK;
        // The slots of this chunk and the next; the next one's rows are fetched while this one computes (pages are
        // scattered, so hardware prefetch cannot run ahead), the first chunk's now.
        const int64_t n_next = len - t0 - n < CHUNK ? len - t0 - n : CHUNK;
        chunk_slots(pages, page_size, t0, n + n_next, slots);
        if (t0 == begin)
            for (int64_t j = 0; j < n; j++) {
                prefetch_row((const char *)k_cache + (size_t)slots[j] * slot_stride, run_bytes);
                prefetch_row((const char *)v_cache + (size_t)slots[j] * slot_stride, run_bytes);
            }
        Prefetcher pf = {k_cache, v_cache, slots + n, n_next, slot_stride, (int64_t)(run_bytes / 64), 0, 0};
        // The values loop runs H * ceil(G / block) * n times: spread the next chunk's 2 * lines * n_next over it.
        const int64_t blocks_per_head = (G + VALUE_REGS / NV - 1) / (VALUE_REGS / NV);
        const int pf_lines = (int)((2 * pf.lines + H * blocks_per_head - 1) / (H * blocks_per_head));
#ifdef __AVX512BF16__
        if (dtype == 1 && kv_dtype == 1)
            scores_bf16(q, k_cache, slots, n, H, G, slot_stride, head_bytes, scale, NV, s);
        else if (quant && dtype == 1)
            scores_codes_bf16(q, k_cache, k_scale, slots, n, H, G, Hkv, slot_stride, head_bytes, kv_dtype, scale, NV,
                              s);
        else
#endif
        if (quant)
            scores_codes(qv, k_cache, k_scale, slots, n, H, G, Hkv, slot_stride, head_bytes, kv_dtype, NV, s);
        else
            for (int64_t j = 0; j < n; j++) {
                const char *kp = (const char *)k_cache + (size_t)slots[j] * slot_stride;
                for (int64_t h = 0; h < H; h++) {
                    __m512 kr[MAX_DIM / 16];
                    for (int i = 0; i < NV; i++)
                        kr[i] = load16(kp + h * head_bytes + (size_t)(i * 16) * esize, dtype);
                    for (int64_t g = 0; g < G; g++) {
                        const int64_t qh = h * G + g;
                        __m512 d = _mm512_mul_ps(qv[qh][0], kr[0]);
                        for (int i = 1; i < NV; i++) d = _mm512_fmadd_ps(qv[qh][i], kr[i], d);
                        s[qh][j] = _mm512_reduce_add_ps(d);
                    }
                }
            }
        for (int64_t j = n; j < (n + 15) / 16 * 16; j++)
            for (int64_t qh = 0; qh < QH; qh++) s[qh][j] = -INFINITY;  // pad the last vector: e^-inf = 0
        for (int64_t qh = 0; qh < QH; qh++) {
            __m512 mx = _mm512_set1_ps(m[qh]);
            for (int64_t j = 0; j < n; j += 16) mx = _mm512_max_ps(mx, _mm512_load_ps(&s[qh][j]));
            const float new_m = _mm512_reduce_max_ps(mx);
            const __m512 nm = _mm512_set1_ps(new_m);
            __m512 sum = _mm512_setzero_ps();
            for (int64_t j = 0; j < n; j += 16) {
                const __m512 e = exp16(_mm512_sub_ps(_mm512_load_ps(&s[qh][j]), nm));
                _mm512_store_ps(&s[qh][j], e);
                sum = _mm512_add_ps(sum, e);
            }
            const float c = m[qh] == -INFINITY ? 0.0f : expf(m[qh] - new_m);
            l[qh] = l[qh] * c + _mm512_reduce_add_ps(sum);
            m[qh] = new_m;
            const __m512 cv = _mm512_set1_ps(c);
            for (int i = 0; i < NV; i++) acc[qh][i] = _mm512_mul_ps(acc[qh][i], cv);
        }
        for (int64_t h = 0; h < H; h++) {
            if (quant) {  // a value's scale joins its softmax weight (s is not read again after this chunk)
                float vs[CHUNK] __attribute__((aligned(64)));
                for (int64_t j = 0; j < CHUNK; j++)
                    vs[j] = j < n ? bf16_to_float(v_scale[slots[j] * Hkv + h]) * KV_UNIT(kv_dtype) : 0.0f;
                for (int64_t g = 0; g < G; g++)
                    for (int64_t j = 0; j < n; j += 16)
                        _mm512_store_ps(&s[h * G + g][j],
                                        _mm512_mul_ps(_mm512_load_ps(&s[h * G + g][j]), _mm512_load_ps(&vs[j])));
            }
            values_head(acc + h * G, s + h * G, (const char *)v_cache + h * head_bytes, slots, n, slot_stride, dtype,
                        esize, quant, kv_dtype, &pf, pf_lines, G, NV);
        }
    }
    float row[MAX_DIM] __attribute__((aligned(64)));
    for (int64_t qh = 0; qh < QH; qh++) {
        for (int i = 0; i < NV; i++) _mm512_store_ps(&row[i * 16], acc[qh][i]);
        finish_row(row, NV * 16, m[qh], l[qh], shared ? shared + qh * NV * 16 : NULL, shared ? shared_lse + qh : NULL);
        store_row((char *)out + (size_t)(qh * NV * 16) * esize, row, NV * 16, dtype);
    }
}

// The vector path for D in {64, 128} (the common head sizes); returns 0 when it does not apply.
static int attend_fast(const void *q, const void *k_cache, const void *v_cache, void *out, const int64_t *pages,
                       int64_t begin, int64_t len, int64_t H, int64_t G, int64_t Hkv, int64_t D, int64_t page_size,
                       float scale, int dtype, size_t esize, const float *shared, const float *shared_lse,
                       int kv_dtype, const uint16_t *k_scale, const uint16_t *v_scale) {
    if (H * G > MAX_QHEADS) return 0;
    if (D == 64)
        attend_avx512(q, k_cache, v_cache, out, pages, begin, len, H, G, Hkv, page_size, scale, dtype, esize, shared,
                      shared_lse, kv_dtype, k_scale, v_scale, 4);
    else if (D == 128)
        attend_avx512(q, k_cache, v_cache, out, pages, begin, len, H, G, Hkv, page_size, scale, dtype, esize, shared,
                      shared_lse, kv_dtype, k_scale, v_scale, 8);
    else
        return 0;
    return 1;
}

#else
static int attend_fast(const void *q, const void *k_cache, const void *v_cache, void *out, const int64_t *pages,
                       int64_t begin, int64_t len, int64_t H, int64_t G, int64_t Hkv, int64_t D, int64_t page_size,
                       float scale, int dtype, size_t esize, const float *shared, const float *shared_lse,
                       int kv_dtype, const uint16_t *k_scale, const uint16_t *v_scale) {
    return 0;
}
#endif

// The shared-prefix part of every group (normalized outputs and log-sum-exps, fp32) into *shared, *shared_lse,
// and each row's first own key into begin; 0 when done, else nonzero (nothing allocated is kept). On AMX tiles
// for the caller's groups, else on vector units.
static int attend_groups(const void *q, const void *k_cache, const void *v_cache, const int64_t *pages,
                         int64_t B, int64_t max_pages, int64_t Hq, int64_t Hkv, int64_t D, int64_t page_size,
                         float scale, int num_threads, const int64_t *rows, const int64_t *offsets,
                         const int64_t *shared_pages, int64_t n_groups, int on_tiles, float **shared,
                         float **shared_lse, int64_t *begin) {
    *shared = malloc((size_t)(B * Hq * D) * sizeof(float));
    *shared_lse = malloc((size_t)(B * Hq) * sizeof(float));
    int status = 2;
    if (*shared && *shared_lse && on_tiles)
        status = attend_prefix_groups(q, k_cache, v_cache, pages, max_pages, rows, offsets, shared_pages, n_groups,
                                      Hq, Hkv, D, page_size, scale, *shared, *shared_lse, num_threads);
    else if (*shared && *shared_lse)
        status = attend_groups_vec(q, k_cache, v_cache, pages, max_pages, rows, offsets, shared_pages, n_groups, Hq,
                                   Hkv, D, page_size, scale, *shared, *shared_lse, num_threads);
    if (status != 0) {
        free(*shared);
        free(*shared_lse);
        *shared = *shared_lse = NULL;
        return status;
    }
    for (int64_t g = 0; g < n_groups; g++)
        for (int64_t i = offsets[g]; i < offsets[g + 1]; i++) begin[rows[i]] = shared_pages[g] * page_size;
    return 0;
}

// Groups found here (find_groups) when the caller passes none, attended on vector units where the build has
// AVX512_BF16; without it, or without groups, every row reads all its pages (the same result).
static void attend_found_groups(const void *q, const void *k_cache, const void *v_cache, const int64_t *pages,
                                const int64_t *lens, int64_t B, int64_t max_pages, int64_t Hq, int64_t Hkv,
                                int64_t D, int64_t page_size, float scale, int num_threads, float **shared,
                                float **shared_lse, int64_t *begin) {
#ifdef __AVX512BF16__
    int64_t *found = malloc((size_t)(3 * B + 1) * sizeof(int64_t));
    char *taken = malloc((size_t)B);
    if (found && taken) {
        int64_t *rows = found, *offsets = found + B, *shared_pages = found + 2 * B + 1;
        const int n = find_groups(pages, lens, B, max_pages, page_size, rows, offsets, shared_pages, taken);
        if (n > 0)
            attend_groups(q, k_cache, v_cache, pages, B, max_pages, Hq, Hkv, D, page_size, scale, num_threads, rows,
                          offsets, shared_pages, n, 0, shared, shared_lse, begin);
    }
    free(found);
    free(taken);
#else
    (void)q, (void)k_cache, (void)v_cache, (void)pages, (void)lens, (void)B, (void)max_pages, (void)Hq, (void)Hkv;
    (void)D, (void)page_size, (void)scale, (void)num_threads, (void)shared, (void)shared_lse, (void)begin;
#endif
}

// Returns 0 on success, 1 when G or D exceed the compiled limits (the caller falls back to torch). Groups
// (rows, offsets, shared_pages, n_groups; see amx_attention.h) are optional: bf16 with AMX attends their shared
// pages once per group; without them, bf16 rows are grouped here where the build has AVX512_BF16. Anything else
// ignores groups (the same result: every row reads all its pages).
int paged_decode_attention(const void *q, const void *k_cache, const void *v_cache, void *out,
                           const int64_t *pages, const int64_t *lens, int64_t B, int64_t max_pages, int64_t Hq,
                           int64_t Hkv, int64_t D, int64_t page_size, float scale, int dtype, int num_threads,
                           const int64_t *rows, const int64_t *offsets, const int64_t *shared_pages,
                           int64_t n_groups, int kv_dtype, const void *k_scale, const void *v_scale) {
    const int64_t G = Hq / Hkv;
    if (G > MAX_GROUP || D > MAX_DIM) return 1;
    if (kv_dtype != dtype && !(kv_quantized(kv_dtype) && k_scale && v_scale)) return 1;
    const size_t esize = dtype == 0 ? 4 : 2, kes = kv_quantized(kv_dtype) ? 1 : esize;
    int64_t *begin = calloc((size_t)B, sizeof(int64_t));
    if (!begin) return 2;
    float *shared = NULL, *shared_lse = NULL;
    if (n_groups > 0 && dtype == 1 && kv_dtype == 1)
        attend_groups(q, k_cache, v_cache, pages, B, max_pages, Hq, Hkv, D, page_size, scale, num_threads, rows,
                      offsets, shared_pages, n_groups, 1, &shared, &shared_lse, begin);
    else if (dtype == 1 && kv_dtype == 1 && B >= 2)
        attend_found_groups(q, k_cache, v_cache, pages, lens, B, max_pages, Hq, Hkv, D, page_size, scale,
                            num_threads, &shared, &shared_lse, begin);
    // Whole sequences (all heads, contiguous reads) per work item when there are enough sequences to keep every
    // thread busy; one kv head per item otherwise (a batch of one still uses every thread).
    int64_t per_item = B >= 2 * (int64_t)num_threads ? MAX_QHEADS / G : 1;
    if (per_item > Hkv) per_item = Hkv;
    if (per_item < 1) per_item = 1;
    const int64_t blocks = (Hkv + per_item - 1) / per_item;
#pragma omp parallel num_threads(num_threads)
    {
#ifdef __AVX512F__
        const unsigned int csr = flush_denormals();
#endif
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < B * blocks; item++) {
            const int64_t b = item / blocks, h0 = (item % blocks) * per_item;
            const int64_t H = Hkv - h0 < per_item ? Hkv - h0 : per_item;
            const size_t off = (size_t)((b * Hq + h0 * G) * D) * esize;
            const char *kh = (const char *)k_cache + (size_t)(h0 * D) * kes;
            const char *vh = (const char *)v_cache + (size_t)(h0 * D) * kes;
            const uint16_t *ksh = k_scale ? (const uint16_t *)k_scale + h0 : NULL;
            const uint16_t *vsh = v_scale ? (const uint16_t *)v_scale + h0 : NULL;
            const int64_t *pb = pages + b * max_pages;
            const int merge = begin[b] > 0;
            const float *sh = merge ? shared + (b * Hq + h0 * G) * D : NULL;
            const float *sh_lse = merge ? shared_lse + b * Hq + h0 * G : NULL;
            if (attend_fast((const char *)q + off, kh, vh, (char *)out + off, pb, begin[b], lens[b], H, G, Hkv, D,
                            page_size, scale, dtype, esize, sh, sh_lse, kv_dtype, ksh, vsh))
                continue;
            for (int64_t h = 0; h < H; h++) {
                const size_t hoff = (size_t)(h * G * D) * esize, koff = (size_t)(h * D) * kes;
                attend_one((const char *)q + off + hoff, kh + koff, vh + koff, (char *)out + off + hoff, pb, begin[b],
                           lens[b], G, Hkv, D, page_size, scale, dtype, esize, merge ? sh + h * G * D : NULL,
                           merge ? sh_lse + h * G : NULL, kv_dtype, ksh ? ksh + h : NULL, vsh ? vsh + h : NULL);
            }
        }
#ifdef __AVX512F__
        _mm_setcsr(csr);
#endif
    }
    free(begin);
    free(shared);
    free(shared_lse);
    return 0;
}
