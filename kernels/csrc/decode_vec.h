// What the decode attention kernels share (paged_decode_attention.c, vec_attention.c): sizes, and with AVX-512
// the loads that widen pool rows to fp32, prefetching, and the 16-vector reduction.
#ifndef SPRIG_DECODE_VEC_H
#define SPRIG_DECODE_VEC_H
#include <stddef.h>
#include <stdint.h>

#include "kv_quant.h"

#define MAX_DIM 256  // largest head size
#define CHUNK 64  // keys scored per softmax update

// The pool slots of keys [t0, t0 + n) of a sequence's pages: one division per chunk (a division per key cost as
// much as a prefill's scores).
static inline void chunk_slots(const int64_t *pages, int64_t page_size, int64_t t0, int64_t n, int64_t *slots) {
    int64_t page = t0 / page_size, off = t0 % page_size;
    for (int64_t j = 0; j < n; j++) {
        slots[j] = pages[page] * page_size + off;
        if (++off == page_size) {
            off = 0;
            page++;
        }
    }
}

#ifdef __AVX512F__
#include <immintrin.h>

#include "vec_exp.h"

// 16 elements of `dtype` at p as floats.
static inline __m512 load16(const void *p, int dtype) {
    if (dtype == 0) return _mm512_loadu_ps(p);
    const __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (dtype == 1) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

// 16 one-byte codes at p as floats, without their scale; e4m3 comes out 2^-8 times its value (its bits placed
// in an fp16: sign, then exponent and mantissa 8 bits down), which KV_UNIT folds back into the scale.
static inline __m512 load16_codes(const void *p, int kv_dtype) {
    const __m128i b = _mm_loadu_si128((const __m128i *)p);
    if (kv_dtype == KV_INT8) return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
    const __m256i w = _mm256_cvtepu8_epi16(b);
    if (kv_dtype == KV_E5M2) return _mm512_cvtph_ps(_mm256_slli_epi16(w, 8));  // e5m2 is an fp16's top byte
    const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8);
    return _mm512_cvtph_ps(_mm256_or_si256(sign, _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7f)), 7)));
}

#define KV_UNIT(kv_dtype) ((kv_dtype) == KV_E4M3 ? 256.0f : 1.0f)

static inline void prefetch_row(const char *p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// The next chunk's key and value rows, fetched into L2 a few lines at a time while this chunk computes. Fetched
// all at once, they would stall on the core's few outstanding misses and then compute would wait on memory
// anyway; spread out, the transfer overlaps the arithmetic (a chunk of 64 keys over 4 bf16 kv heads is 64 KB).
typedef struct {
    const char *k, *v;  // the kv heads' first rows
    const int64_t *slots;  // the next chunk's slots
    int64_t n;  // keys in the next chunk (0: nothing to fetch)
    size_t stride;  // bytes between slots
    int64_t lines;  // 64-byte lines of one slot's run of kv heads
    int64_t key, line;  // the cursor: next line of K (line < lines) or V (lines <= line < 2 * lines) of `key`
} Prefetcher;

static inline void prefetch_some(Prefetcher *pf, int count) {
    for (int c = 0; c < count && pf->key < pf->n; c++) {
        const int in_v = pf->line >= pf->lines;
        const char *base = (in_v ? pf->v : pf->k) + (size_t)pf->slots[pf->key] * pf->stride;
        _mm_prefetch(base + (size_t)(pf->line - (in_v ? pf->lines : 0)) * 64, _MM_HINT_T1);
        if (++pf->line == 2 * pf->lines) {
            pf->line = 0;
            pf->key++;
        }
    }
}

// The sums of 16 vectors, in order, as one vector: a transpose-and-add tree (45 instructions instead of 16
// horizontal reductions of ~8 each).
static inline __m512 sum16(const __m512 v[16]) {
    __m512 t[4];
    for (int b = 0; b < 4; b++) {
        const __m512 *w = v + 4 * b;
        const __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(w[0], w[1]), _mm512_unpackhi_ps(w[0], w[1]));
        const __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(w[2], w[3]), _mm512_unpackhi_ps(w[2], w[3]));
        const __m512d a = _mm512_castps_pd(s01), c = _mm512_castps_pd(s23);
        t[b] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, c)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, c)));
    }  // t[b], 128-bit lane L: the partial sums of v[4b..4b+3] over their elements 4L..4L+3
    const __m512 w01 = _mm512_add_ps(_mm512_shuffle_f32x4(t[0], t[1], 0x44), _mm512_shuffle_f32x4(t[0], t[1], 0xEE));
    const __m512 w23 = _mm512_add_ps(_mm512_shuffle_f32x4(t[2], t[3], 0x44), _mm512_shuffle_f32x4(t[2], t[3], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88), _mm512_shuffle_f32x4(w01, w23, 0xDD));
}

#endif
#endif
