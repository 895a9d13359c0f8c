// Decode attention over a prefix that several sequences share through the radix tree, on AMX tiles.
//
// One row's decode attention is a matrix-vector product per head, bound by the vector units. The rows of a
// group (same leading pages) attend to the same keys, so their queries of one kv head form a matrix: scores
// S = Q K^T and outputs P V are then real matrix products, which AMX runs an order of magnitude faster, and the
// shared keys and values are read once per group instead of once per row. The caller merges the result with
// each row's own pages by log-sum-exp.
//
// Per (group, kv head): the shared keys are packed once as B tiles of K^T (VNNI: row r of a tile holds the dim
// pair (2r, 2r+1) of 16 keys), the values as B tiles of V (row r: key pair (2r, 2r+1) of 16 dims); then each
// block of 16 queries runs an online softmax over chunks of KEY_CHUNK keys, with S and P V on tiles.
#include "amx_attention.h"

#include <math.h>
#include <stdlib.h>

#include "amx.h"

#ifdef SPRIG_AMX
#include "vec_exp.h"

#define KEY_CHUNK 256  // keys per softmax update (a multiple of 32)
#define MAX_D 128

// Transpose 16 rows of 16 dwords in place (unpack within 128-bit lanes, then a 4 x 4 transpose of lanes).
static inline void transpose16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) {  // u[4g + j], lane L: rows 4g..4g+3, element 4L + j
        u[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    for (int j = 0; j < 4; j++) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
        const __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
        const __m512i v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
        r[j] = _mm512_shuffle_i32x4(v0, v2, 0x88);
        r[4 + j] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
        r[8 + j] = _mm512_shuffle_i32x4(v1, v3, 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
    }
}

// Keys t < n (zeros up to n_pad) as tiles kp[t / 16][dim / 32]: 16 rows (dim pairs) x 16 keys.
static void pack_keys(uint32_t *kp, const char *k_head, const int64_t *slots, int64_t n, int64_t n_pad, int64_t D,
                      size_t slot_stride) {
    const int64_t DC = D / 32;
    for (int64_t kb = 0; kb < n_pad / 16; kb++)
        for (int64_t c = 0; c < DC; c++) {
            __m512i r[16];
            for (int j = 0; j < 16; j++) {
                const int64_t t = kb * 16 + j;
                r[j] = t < n ? _mm512_loadu_si512(k_head + (size_t)slots[t] * slot_stride + (size_t)c * 64)
                             : _mm512_setzero_si512();
            }
            transpose16(r);
            for (int j = 0; j < 16; j++) _mm512_store_si512(kp + ((kb * DC + c) * 16 + j) * 16, r[j]);
        }
}

// Values t < n (zeros up to n_pad) as tiles vp[t / 32][dim / 16]: 16 rows (key pairs) x 16 dims.
static void pack_values(uint32_t *vp, const char *v_head, const int64_t *slots, int64_t n, int64_t n_pad, int64_t D,
                        size_t slot_stride) {
    const int64_t DB = D / 16;
    for (int64_t kb = 0; kb < n_pad / 32; kb++)
        for (int r = 0; r < 16; r++) {
            const int64_t t0 = kb * 32 + 2 * r, t1 = t0 + 1;
            const char *a = t0 < n ? v_head + (size_t)slots[t0] * slot_stride : NULL;
            const char *b = t1 < n ? v_head + (size_t)slots[t1] * slot_stride : NULL;
            for (int64_t db = 0; db < DB; db++) {
                const __m512i x = a ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(a + db * 32)))
                                    : _mm512_setzero_si512();
                const __m512i y = b ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(b + db * 32)))
                                    : _mm512_setzero_si512();
                _mm512_store_si512(vp + ((kb * DB + db) * 16 + r) * 16, _mm512_or_si512(x, _mm512_slli_epi32(y, 16)));
            }
        }
}

// Scores of 16 queries (bf16 rows qb, stride D) against keys [t0, t0 + nc) into s [16][KEY_CHUNK].
static inline void chunk_scores(const uint16_t *qb, const uint32_t *kp, int64_t t0, int64_t nc, int64_t D,
                                float *s) {
    const int64_t DC = D / 32;
    _tile_loadd(4, qb, D * 2);
    _tile_loadd(5, qb + 32, D * 2);
    if (DC == 4) {
        _tile_loadd(6, qb + 64, D * 2);
        _tile_loadd(7, qb + 96, D * 2);
    }
    for (int64_t kb = 0; kb < nc / 16; kb += 2) {  // two C tiles in flight: each product waits on the last
        const uint32_t *k = kp + (t0 / 16 + kb) * DC * 256, *k2 = k + DC * 256;
        _tile_zero(0);
        _tile_zero(3);
        _tile_loadd(1, k, 64);
        _tile_dpbf16ps(0, 4, 1);
        _tile_loadd(2, k2, 64);
        _tile_dpbf16ps(3, 4, 2);
        _tile_loadd(1, k + 256, 64);
        _tile_dpbf16ps(0, 5, 1);
        _tile_loadd(2, k2 + 256, 64);
        _tile_dpbf16ps(3, 5, 2);
        if (DC == 4) {
            _tile_loadd(1, k + 512, 64);
            _tile_dpbf16ps(0, 6, 1);
            _tile_loadd(2, k2 + 512, 64);
            _tile_dpbf16ps(3, 6, 2);
            _tile_loadd(1, k + 768, 64);
            _tile_dpbf16ps(0, 7, 1);
            _tile_loadd(2, k2 + 768, 64);
            _tile_dpbf16ps(3, 7, 2);
        }
        _tile_stored(0, s + kb * 16, KEY_CHUNK * 4);
        _tile_stored(3, s + kb * 16 + 16, KEY_CHUNK * 4);
    }
}

// o [16][D] = p [16][nc] (bf16, stride KEY_CHUNK) . values [t0, t0 + nc), 64 dims (four C tiles) at a time.
static inline void chunk_values(const uint16_t *p, const uint32_t *vp, int64_t t0, int64_t nc, int64_t D,
                                float *o) {
    const int64_t DB = D / 16;
    for (int64_t d0 = 0; d0 < DB; d0 += 4) {
        _tile_zero(4);
        _tile_zero(5);
        _tile_zero(6);
        _tile_zero(7);
        for (int64_t kb = 0; kb < nc / 32; kb++) {
            const uint32_t *v = vp + ((t0 / 32 + kb) * DB + d0) * 256;
            _tile_loadd(0, p + kb * 32, KEY_CHUNK * 2);
            _tile_loadd(1, v, 64);
            _tile_dpbf16ps(4, 0, 1);
            _tile_loadd(2, v + 256, 64);
            _tile_dpbf16ps(5, 0, 2);
            _tile_loadd(1, v + 512, 64);
            _tile_dpbf16ps(6, 0, 1);
            _tile_loadd(2, v + 768, 64);
            _tile_dpbf16ps(7, 0, 2);
        }
        _tile_stored(4, o + d0 * 16, D * 4);
        _tile_stored(5, o + d0 * 16 + 16, D * 4);
        _tile_stored(6, o + d0 * 16 + 32, D * 4);
        _tile_stored(7, o + d0 * 16 + 48, D * 4);
    }
}

// One block of 16 queries (bf16 rows of qb) over the packed keys: row i sees keys [0, lim[i]) (lim[i] >= 1).
// Leaves each row's unnormalized output in acc, its running maximum in m and its sum of exponentials in l.
static void attend_block(const uint16_t *qb, const uint32_t *kp, const uint32_t *vp, const int64_t lim[16],
                         int64_t D, float scale, float acc[16][MAX_D], float *m, float *l) {
    float s[16 * KEY_CHUNK] __attribute__((aligned(64))), o[16 * MAX_D] __attribute__((aligned(64)));
    uint16_t p[16 * KEY_CHUNK] __attribute__((aligned(64)));
    const __m512 sc = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
    int64_t most = 0;
    for (int i = 0; i < 16; i++) {
        most = lim[i] > most ? lim[i] : most;
        m[i] = -INFINITY;
        l[i] = 0.0f;
        for (int64_t d = 0; d < D; d += 16) _mm512_store_ps(&acc[i][d], _mm512_setzero_ps());
    }
    const int64_t end = (most + 31) / 32 * 32;  // keys past every row's limit are never scored
    for (int64_t t0 = 0; t0 < end; t0 += KEY_CHUNK) {
        const int64_t nc = end - t0 < KEY_CHUNK ? end - t0 : KEY_CHUNK;
        chunk_scores(qb, kp, t0, nc, D, s);
        float c[16];
        for (int i = 0; i < 16; i++) {
            float *si = s + i * KEY_CHUNK;
            const int64_t n = lim[i];
            __m512 mx = _mm512_set1_ps(m[i]);
            for (int64_t j = 0; j < nc; j += 16) {
                const __mmask16 live = t0 + j + 16 <= n ? 0xFFFF : t0 + j >= n ? 0 : (__mmask16)((1u << (n - t0 - j)) - 1);
                const __m512 x = _mm512_mask_mul_ps(ninf, live, _mm512_load_ps(si + j), sc);  // unseen keys: -inf
                _mm512_store_ps(si + j, x);
                mx = _mm512_max_ps(mx, x);
            }
            const float new_m = _mm512_reduce_max_ps(mx);  // finite: key 0 is in every row's first chunk
            const __m512 nm = _mm512_set1_ps(new_m);
            __m512 sum = _mm512_setzero_ps();
            for (int64_t j = 0; j < nc; j += 16) {
                const __m512 e = exp16(_mm512_sub_ps(_mm512_load_ps(si + j), nm));
                sum = _mm512_add_ps(sum, e);
                _mm256_store_si256((__m256i *)(p + i * KEY_CHUNK + j), (__m256i)_mm512_cvtneps_pbh(e));
            }
            c[i] = m[i] == -INFINITY ? 0.0f : expf(m[i] - new_m);  // rescales what earlier chunks accumulated
            l[i] = l[i] * c[i] + _mm512_reduce_add_ps(sum);
            m[i] = new_m;
        }
        chunk_values(p, vp, t0, nc, D, o);
        for (int i = 0; i < 16; i++) {
            const __m512 cv = _mm512_set1_ps(c[i]);
            for (int64_t d = 0; d < D; d += 16)
                _mm512_store_ps(&acc[i][d], _mm512_fmadd_ps(_mm512_load_ps(&acc[i][d]), cv, _mm512_load_ps(o + i * D + d)));
        }
    }
}

// Per-thread buffers: packed keys and values (kp, vp) and the slots of the keys being packed.
typedef struct {
    uint32_t *kp, *vp;
    int64_t *slots;
} scratch;

// Buffers for up to max_keys keys of head size D, tile config and denormal flush for this thread; returns the
// MXCSR to restore with close_thread. s->kp is NULL when memory ran out.
static unsigned int open_thread(scratch *s, int64_t max_keys, int64_t D) {
    const size_t bytes = (size_t)((max_keys + 31) / 32 * 32) * (size_t)D * 2;
    s->kp = aligned_alloc(64, bytes);
    s->vp = aligned_alloc(64, bytes);
    s->slots = malloc((size_t)(max_keys > 0 ? max_keys : 1) * sizeof(int64_t));
    if (!s->kp || !s->vp || !s->slots) {
        free(s->kp), free(s->vp), free(s->slots);
        s->kp = NULL;
    }
    amx_load_config();
    return flush_denormals();
}

static void close_thread(scratch *s, unsigned int csr) {
    _tile_release();
    _mm_setcsr(csr);
    if (s->kp) free(s->kp), free(s->vp), free(s->slots);
}

// Keys and values [0, n) of one kv head (k_head, v_head: its first slot) of a sequence with page table `table`,
// packed into s->kp, s->vp; returns n rounded up to the 32 keys a value tile holds.
static int64_t pack_head(const scratch *s, const char *k_head, const char *v_head, const int64_t *table, int64_t n,
                         int64_t page_size, int64_t D, size_t slot_stride) {
    const int64_t n_pad = (n + 31) / 32 * 32;
    for (int64_t t = 0; t < n; t++) s->slots[t] = table[t / page_size] * page_size + t % page_size;
    pack_keys(s->kp, k_head, s->slots, n, n_pad, D, slot_stride);
    pack_values(s->vp, v_head, s->slots, n, n_pad, D, slot_stride);
    return n_pad;
}

// One group and one kv head: all the group's query heads of that kv head against its shared keys.
static void attend_group_head(const scratch *sc, const uint16_t *q, const char *k_head, const char *v_head,
                              const int64_t *table, int64_t n, const int64_t *rows, int64_t n_rows, int64_t h,
                              int64_t G, int64_t Hq, int64_t Hkv, int64_t D, int64_t page_size, float scale,
                              float *out, float *lse) {
    pack_head(sc, k_head, v_head, table, n, page_size, D, (size_t)(Hkv * D) * 2);
    const int64_t M = n_rows * G;
    uint16_t qb[16 * MAX_D] __attribute__((aligned(64)));
    float acc[16][MAX_D] __attribute__((aligned(64))), m[16], l[16];
    int64_t lim[16];
    for (int i = 0; i < 16; i++) lim[i] = n;
    for (int64_t m0 = 0; m0 < M; m0 += 16) {
        const int64_t valid = M - m0 < 16 ? M - m0 : 16;
        for (int64_t i = 0; i < 16; i++) {  // query i of the block: row rows[(m0 + i) / G], head h * G + (m0 + i) % G
            if (i < valid) {
                const int64_t b = rows[(m0 + i) / G], qh = h * G + (m0 + i) % G;
                memcpy(qb + i * D, q + (b * Hq + qh) * D, (size_t)D * 2);
            } else {
                memset(qb + i * D, 0, (size_t)D * 2);
            }
        }
        attend_block(qb, sc->kp, sc->vp, lim, D, scale, acc, m, l);
        for (int64_t i = 0; i < valid; i++) {
            const int64_t b = rows[(m0 + i) / G], qh = h * G + (m0 + i) % G;
            const __m512 inv = _mm512_set1_ps(1.0f / l[i]);
            for (int64_t d = 0; d < D; d += 16)
                _mm512_storeu_ps(out + (b * Hq + qh) * D + d, _mm512_mul_ps(_mm512_load_ps(&acc[i][d]), inv));
            lse[b * Hq + qh] = m[i] + logf(l[i]);
        }
    }
}

#define QUERIES_PER_ITEM 128  // queries of one sequence and kv head per work item (items balance the threads)

// Queries [m0, m1) of one extending sequence and one kv head; query m is new token m / G, head h * G + m % G.
static void extend_item(const scratch *sc, const uint16_t *q, int64_t q_stride, const char *k_head,
                        const char *v_head, uint16_t *out, const int64_t *table, int64_t start, int64_t prefix,
                        int64_t m0, int64_t m1, int64_t h, int64_t G, int64_t Hq, int64_t Hkv, int64_t D,
                        int64_t page_size, float scale) {
    const int64_t n = prefix + (m1 - 1) / G + 1;  // keys the item's last query sees
    pack_head(sc, k_head, v_head, table, n, page_size, D, (size_t)(Hkv * D) * 2);
    uint16_t qb[16 * MAX_D] __attribute__((aligned(64)));
    float acc[16][MAX_D] __attribute__((aligned(64))), m[16], l[16];
    int64_t lim[16];
    for (int64_t b0 = m0; b0 < m1; b0 += 16) {
        const int64_t valid = m1 - b0 < 16 ? m1 - b0 : 16;
        for (int64_t i = 0; i < 16; i++) {
            if (i < valid) {
                const int64_t tok = (b0 + i) / G, qh = h * G + (b0 + i) % G;
                memcpy(qb + i * D, q + (start + tok) * q_stride + qh * D, (size_t)D * 2);
                lim[i] = prefix + tok + 1;
            } else {
                memset(qb + i * D, 0, (size_t)D * 2);
                lim[i] = 1;
            }
        }
        attend_block(qb, sc->kp, sc->vp, lim, D, scale, acc, m, l);
        for (int64_t i = 0; i < valid; i++) {
            const int64_t tok = (b0 + i) / G, qh = h * G + (b0 + i) % G;
            const __m512 inv = _mm512_set1_ps(1.0f / l[i]);
            uint16_t *dst = out + (start + tok) * Hq * D + qh * D;
            for (int64_t d = 0; d < D; d += 16)
                _mm256_storeu_si256((__m256i *)(dst + d),
                                    (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_load_ps(&acc[i][d]), inv)));
        }
    }
}
#endif

int attend_prefix_groups(const uint16_t *q, const uint16_t *k_cache, const uint16_t *v_cache, const int64_t *pages,
                         int64_t max_pages, const int64_t *rows, const int64_t *offsets, const int64_t *shared_pages,
                         int64_t n_groups, int64_t Hq, int64_t Hkv, int64_t D, int64_t page_size, float scale,
                         float *out, float *lse, int num_threads) {
#ifdef SPRIG_AMX
    if ((D != 64 && D != 128) || amx_gemm_available() != 0) return 1;
    if (n_groups <= 0) return 0;
    int64_t most = 0;  // the longest shared prefix (pages) sizes the per-thread packing buffers
    for (int64_t g = 0; g < n_groups; g++) most = shared_pages[g] > most ? shared_pages[g] : most;
    const int64_t G = Hq / Hkv;
    int failed = 0;
#pragma omp parallel num_threads(num_threads)
    {
        scratch sc;
        const unsigned int csr = open_thread(&sc, most * page_size, D);
        if (!sc.kp) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < n_groups * Hkv; item++) {
            if (!sc.kp) continue;
            const int64_t g = item / Hkv, h = item % Hkv;
            const int64_t *grp = rows + offsets[g], n_rows = offsets[g + 1] - offsets[g];
            attend_group_head(&sc, q, (const char *)k_cache + h * D * 2, (const char *)v_cache + h * D * 2,
                              pages + grp[0] * max_pages, shared_pages[g] * page_size, grp, n_rows, h, G, Hq, Hkv, D,
                              page_size, scale, out, lse);
        }
        close_thread(&sc, csr);
    }
    return failed ? 2 : 0;
#else
    (void)q, (void)k_cache, (void)v_cache, (void)pages, (void)max_pages, (void)rows, (void)offsets;
    (void)shared_pages, (void)n_groups, (void)Hq, (void)Hkv, (void)D, (void)page_size, (void)scale, (void)out;
    (void)lse, (void)num_threads;
    return 1;
#endif
}

int extend_attention_amx(const uint16_t *q, int64_t q_stride, const uint16_t *k_cache, const uint16_t *v_cache,
                         uint16_t *out, const int64_t *pages, int64_t max_pages, const int64_t *starts,
                         const int64_t *ext_lens, const int64_t *prefix_lens, int64_t n_seqs, int64_t Hq, int64_t Hkv,
                         int64_t D, int64_t page_size, float scale, int num_threads) {
#ifdef SPRIG_AMX
    if ((D != 64 && D != 128) || amx_gemm_available() != 0) return 1;
    if (n_seqs <= 0) return 0;
    const int64_t G = Hq / Hkv;
    int64_t *first_item = malloc((size_t)(n_seqs + 1) * sizeof(int64_t));  // items of sequence s: [first, next)
    if (!first_item) return 2;
    int64_t most = 0;
    first_item[0] = 0;
    for (int64_t s = 0; s < n_seqs; s++) {
        const int64_t keys = prefix_lens[s] + ext_lens[s];
        most = keys > most ? keys : most;
        first_item[s + 1] = first_item[s] + Hkv * ((ext_lens[s] * G + QUERIES_PER_ITEM - 1) / QUERIES_PER_ITEM);
    }
    int failed = 0;
#pragma omp parallel num_threads(num_threads)
    {
        scratch sc;
        const unsigned int csr = open_thread(&sc, most, D);
        if (!sc.kp) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < first_item[n_seqs]; item++) {
            if (!sc.kp) continue;
            int64_t s = 0;
            while (first_item[s + 1] <= item) s++;
            const int64_t per_head = (first_item[s + 1] - first_item[s]) / Hkv, k = item - first_item[s];
            const int64_t h = k / per_head, m0 = (k % per_head) * QUERIES_PER_ITEM;
            const int64_t m1 = m0 + QUERIES_PER_ITEM < ext_lens[s] * G ? m0 + QUERIES_PER_ITEM : ext_lens[s] * G;
            extend_item(&sc, q, q_stride, (const char *)k_cache + h * D * 2, (const char *)v_cache + h * D * 2,
                        out, pages + s * max_pages, starts[s], prefix_lens[s], m0, m1, h, G, Hq, Hkv, D, page_size,
                        scale);
        }
        close_thread(&sc, csr);
    }
    free(first_item);
    return failed ? 2 : 0;
#else
    (void)q, (void)q_stride, (void)k_cache, (void)v_cache, (void)out, (void)pages, (void)max_pages, (void)starts;
    (void)ext_lens, (void)prefix_lens, (void)n_seqs, (void)Hq, (void)Hkv, (void)D, (void)page_size, (void)scale;
    (void)num_threads;
    return 1;
#endif
}
