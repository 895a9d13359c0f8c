// Attention on vector units (AVX512_BF16, bf16 pool, head size 64 or 128) for many queries over the same keys,
// the counterpart of amx_attention.c on CPUs without AMX:
// - decode rows that share leading pages through the radix tree (a system prompt, few-shot examples, a RAG
//   context): each group's common keys are attended once for all its rows, which then walk only their own pages
//   and merge the two parts by log-sum-exp (paged_decode_attention.c); 0.83 -> 0.66 ms per layer at 16 rows in 4
//   groups over 512 shared + 188 own keys on two cores, where every row otherwise reads all its keys from DRAM.
// Prefill and extend have their own kernel (vec_extend.c).
// Queries go a few at a time (their value sums in registers) over the keys, which stay in L2 between blocks.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bf16.h"
#include "decode_vec.h"
#include "vec_attention.h"

// Decode rows whose page tables begin with the same pages share those keys through the radix tree. Rows are
// grouped by their first page, and a group of two or more keeps the leading pages all its rows have in common
// (never a row's last page, which holds its new key) when they hold MIN_SHARED_TOKENS keys or more: the rule of
// kernels/attention.py's _split_shared_prefixes, for callers that pass no groups. Returns the number of groups.
int find_groups(const int64_t *pages, const int64_t *lens, int64_t B, int64_t max_pages, int64_t page_size,
                int64_t *rows, int64_t *offsets, int64_t *shared_pages, char *taken) {
    const int64_t min_pages = (MIN_SHARED_TOKENS + page_size - 1) / page_size;
    int n_groups = 0;
    int64_t n_rows = 0;
    memset(taken, 0, (size_t)B);
    offsets[0] = 0;
    for (int64_t i = 0; i < B; i++) {
        if (taken[i]) continue;
        const int64_t *lead = pages + i * max_pages;
        int64_t members = 0, common = max_pages;
        for (int64_t j = i; j < B; j++) {
            const int64_t *pj = pages + j * max_pages;
            if (taken[j] || pj[0] != lead[0]) continue;
            const int64_t limit = (lens[j] + page_size - 1) / page_size - 1;
            int64_t c = 0;
            while (c < limit && pj[c] == lead[c]) c++;
            common = c < common ? c : common;
            members++;
        }
        if (members < 2 || common < min_pages) continue;
        for (int64_t j = i; j < B; j++)
            if (!taken[j] && pages[j * max_pages] == lead[0]) {
                taken[j] = 1;
                rows[n_rows++] = j;
            }
        shared_pages[n_groups] = common;
        offsets[++n_groups] = n_rows;
    }
    return n_groups;
}


int vec_attention_available(void) {
#ifdef __AVX512BF16__
    return 0;
#else
    return 1;
#endif
}

#ifdef __AVX512BF16__
#define GROUP_REGS 16  // fp32 accumulators of a query block's value sums, kept in registers

// Queries qs[0 .. nq) (bf16, D = 16 * NV) attend to one kv head's keys [0, lims[k]) of the pages (each query its
// own count; len = the largest): scores on bf16 pairs (VDPBF16PS), an online softmax a chunk at a time, and the
// value sums of all nq queries from one read of each value row. Writes each query's normalized output (fp32) and
// log-sum-exp. nq * NV <= GROUP_REGS; nq is a constant when inlined, so the accumulators stay in registers.
static inline __attribute__((always_inline)) void attend_query_block(
    const uint16_t *const *qs, const int nq, const char *kh, const char *vh, const int64_t *pages, const int64_t *lims,
    int64_t len, int64_t page_size, size_t slot_stride, float scale, float *const *outs, float *const *lses,
    const int NV) {
    __m512 a[GROUP_REGS];
    __m512bh qb[GROUP_REGS / 4][MAX_DIM / 32];
    float s[GROUP_REGS / 4][CHUNK] __attribute__((aligned(64))), m[GROUP_REGS / 4], l[GROUP_REGS / 4];
    int64_t slots[CHUNK];
    const __m512 sc = _mm512_set1_ps(scale);
    for (int k = 0; k < nq; k++) {
        for (int i = 0; i < NV / 2; i++) qb[k][i] = (__m512bh)_mm512_loadu_si512(qs[k] + i * 32);
        for (int i = 0; i < NV; i++) a[k * NV + i] = _mm512_setzero_ps();
        m[k] = -INFINITY;
        l[k] = 0.0f;
    }
    for (int64_t t0 = 0; t0 < len; t0 += CHUNK) {
        const int64_t n = len - t0 < CHUNK ? len - t0 : CHUNK;
        chunk_slots(pages, page_size, t0, n, slots);
        for (int k = 0; k < nq; k++) {
            for (int64_t j0 = 0; j0 < n; j0 += 16) {
                __m512 d[16];
                for (int j = 0; j < 16; j++) {
                    const char *kp = kh + (size_t)slots[j0 + j < n ? j0 + j : 0] * slot_stride;
                    d[j] = _mm512_dpbf16_ps(_mm512_setzero_ps(), qb[k][0], (__m512bh)_mm512_loadu_si512(kp));
                    for (int i = 1; i < NV / 2; i++)
                        d[j] = _mm512_dpbf16_ps(d[j], qb[k][i], (__m512bh)_mm512_loadu_si512(kp + (size_t)i * 64));
                }
                _mm512_store_ps(&s[k][j0], _mm512_mul_ps(sum16(d), sc));
            }
            // e^-inf = 0 past the keys and past this query's own (a causal limit; the first chunk always has key 0)
            const int64_t own = lims[k] - t0 < n ? (lims[k] - t0 > 0 ? lims[k] - t0 : 0) : n;
            for (int64_t j = own; j < (n + 15) / 16 * 16; j++) s[k][j] = -INFINITY;
            __m512 mx = _mm512_set1_ps(m[k]);
            for (int64_t j = 0; j < n; j += 16) mx = _mm512_max_ps(mx, _mm512_load_ps(&s[k][j]));
            const float new_m = _mm512_reduce_max_ps(mx);
            __m512 sum = _mm512_setzero_ps();
            for (int64_t j = 0; j < n; j += 16) {
                const __m512 e = exp16(_mm512_sub_ps(_mm512_load_ps(&s[k][j]), _mm512_set1_ps(new_m)));
                _mm512_store_ps(&s[k][j], e);
                sum = _mm512_add_ps(sum, e);
            }
            const float c = m[k] == -INFINITY ? 0.0f : expf(m[k] - new_m);
            l[k] = l[k] * c + _mm512_reduce_add_ps(sum);
            m[k] = new_m;
            for (int i = 0; i < NV; i++) a[k * NV + i] = _mm512_mul_ps(a[k * NV + i], _mm512_set1_ps(c));
        }
        for (int64_t j = 0; j < n; j++) {
            const char *vp = vh + (size_t)slots[j] * slot_stride;
            __m512 v[MAX_DIM / 16];
            for (int i = 0; i < NV; i++) v[i] = load16(vp + (size_t)i * 32, 1);
            for (int k = 0; k < nq; k++) {
                const __m512 p = _mm512_set1_ps(s[k][j]);
                for (int i = 0; i < NV; i++) a[k * NV + i] = _mm512_fmadd_ps(p, v[i], a[k * NV + i]);
            }
        }
    }
    for (int k = 0; k < nq; k++) {
        const __m512 inv = _mm512_set1_ps(1.0f / l[k]);
        for (int i = 0; i < NV; i++) _mm512_storeu_ps(outs[k] + i * 16, _mm512_mul_ps(a[k * NV + i], inv));
        *lses[k] = m[k] + logf(l[k]);
    }
}

// attend_query_block for nq <= QB queries: a whole block with the constant QB, a short one query at a time.
static inline __attribute__((always_inline)) void attend_block(
    const uint16_t *const *qs, int nq, const int QB, const char *kh, const char *vh, const int64_t *pages,
    const int64_t *lims, int64_t len, int64_t page_size, size_t slot_stride, float scale, float *const *outs,
    float *const *lses, const int NV) {
    if (nq == QB) {
        attend_query_block(qs, QB, kh, vh, pages, lims, len, page_size, slot_stride, scale, outs, lses, NV);
        return;
    }
    for (int k = 0; k < nq; k++)
        attend_query_block(qs + k, 1, kh, vh, pages, lims + k, lims[k], page_size, slot_stride, scale, outs + k,
                           lses + k, NV);
}

// One group's shared keys for one kv head: its rows' G query heads each, a block of GROUP_REGS / NV queries per
// pass. The first pass reads the keys and values from memory, the others find them in L2: the group's rows read
// their common prefix once instead of once each.
static inline __attribute__((always_inline)) void attend_group_vec(
    const uint16_t *q, const char *kh, const char *vh, const int64_t *pages, int64_t len, const int64_t *grp,
    int64_t n_rows, int64_t h, int64_t G, int64_t Hq, int64_t page_size, size_t slot_stride, float scale,
    float *shared, float *shared_lse, const int NV) {
    const int QB = GROUP_REGS / NV;
    const int64_t D = NV * 16, total = n_rows * G;
    const int64_t lims[GROUP_REGS / 4] = {len, len, len, len};
    for (int64_t q0 = 0; q0 < total; q0 += QB) {
        const uint16_t *qs[GROUP_REGS / 4];
        float *outs[GROUP_REGS / 4], *lses[GROUP_REGS / 4];
        const int nq = total - q0 < QB ? (int)(total - q0) : QB;
        for (int k = 0; k < nq; k++) {
            const int64_t row = grp[(q0 + k) / G], qh = h * G + (q0 + k) % G;
            qs[k] = q + (row * Hq + qh) * D;
            outs[k] = shared + (row * Hq + qh) * D;
            lses[k] = shared_lse + row * Hq + qh;
        }
        attend_block(qs, nq, QB, kh, vh, pages, lims, len, page_size, slot_stride, scale, outs, lses, NV);
    }
}

// Every group's shared keys (see find_groups) on vector units, into shared / shared_lse; 0 when done.
int attend_groups_vec(const uint16_t *q, const void *k_cache, const void *v_cache, const int64_t *pages,
                      int64_t max_pages, const int64_t *rows, const int64_t *offsets, const int64_t *shared_pages,
                      int64_t n_groups, int64_t Hq, int64_t Hkv, int64_t D, int64_t page_size, float scale,
                      float *shared, float *shared_lse, int num_threads) {
    if (D != 64 && D != 128) return 1;
    const int64_t G = Hq / Hkv;
    const size_t slot_stride = (size_t)(Hkv * D) * 2;
#pragma omp parallel num_threads(num_threads)
    {
        const unsigned int csr = flush_denormals();
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < n_groups * Hkv; item++) {
            const int64_t g = item / Hkv, h = item % Hkv;
            const int64_t *grp = rows + offsets[g], n_rows = offsets[g + 1] - offsets[g];
            const char *kh = (const char *)k_cache + (size_t)(h * D) * 2;
            const char *vh = (const char *)v_cache + (size_t)(h * D) * 2;
            const int64_t *pg = pages + grp[0] * max_pages, len = shared_pages[g] * page_size;
            if (D == 64)
                attend_group_vec(q, kh, vh, pg, len, grp, n_rows, h, G, Hq, page_size, slot_stride, scale, shared,
                                 shared_lse, 4);
            else
                attend_group_vec(q, kh, vh, pg, len, grp, n_rows, h, G, Hq, page_size, slot_stride, scale, shared,
                                 shared_lse, 8);
        }
        _mm_setcsr(csr);
    }
    return 0;
}

#else
int attend_groups_vec(const uint16_t *q, const void *k_cache, const void *v_cache, const int64_t *pages,
                      int64_t max_pages, const int64_t *rows, const int64_t *offsets, const int64_t *shared_pages,
                      int64_t n_groups, int64_t Hq, int64_t Hkv, int64_t D, int64_t page_size, float scale,
                      float *shared, float *shared_lse, int num_threads) {
    (void)q, (void)k_cache, (void)v_cache, (void)pages, (void)max_pages, (void)rows, (void)offsets;
    (void)shared_pages, (void)n_groups, (void)Hq, (void)Hkv, (void)D, (void)page_size, (void)scale, (void)shared;
    (void)shared_lse, (void)num_threads;
    return 1;
}
#endif
