// Attention on vector units (AVX512_BF16, bf16 pool, head size 64 or 128) for many queries over the same keys,
// the counterpart of amx_attention.c on CPUs without AMX:
// - decode rows that share leading pages through the radix tree (a system prompt, few-shot examples, a RAG
//   context): each group's common keys are attended once for all its rows, which then walk only their own pages
//   and merge the two parts by log-sum-exp (paged_decode_attention.c); 0.83 -> 0.66 ms per layer at 16 rows in 4
//   groups over 512 shared + 188 own keys on two cores, where every row otherwise reads all its keys from DRAM.
// Each group's shared keys and values are packed once per kv head (packed_kv.h); its queries then go a few at a
// time over the packed rows, which stay in L2. Prefill and extend have their own kernel (vec_extend.c).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "decode_vec.h"
#include "packed_kv.h"
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
// One group's shared keys for one kv head, packed once into `packed` (packed_kv.h): its rows' G query heads each,
// a block of QUERY_REGS / NV queries per pass, every pass reading the packed rows from L2: the group's rows read
// their common prefix once instead of once each.
static inline __attribute__((always_inline)) void attend_group_vec(
    const uint16_t *q, const char *kh, const char *vh, const int64_t *pages, int64_t len, const int64_t *grp,
    int64_t n_rows, int64_t h, int64_t G, int64_t Hq, int64_t page_size, size_t slot_stride, float scale,
    uint32_t *packed, float *shared, float *shared_lse, const int NV) {
    const int QB = QUERY_REGS / NV;
    const int64_t D = NV * 16, total = n_rows * G;
    const int64_t lims[QUERY_REGS / 4] = {len, len, len, len};
    float spare[MAX_HEAD] __attribute__((aligned(64))), spare_lse;
    const KVHead keys = {kh, slot_stride, 1, NULL, 0}, values = {vh, slot_stride, 1, NULL, 0};
    pack_kv(packed, &keys, &values, pages, len, page_size, D);
    const uint32_t *vp = packed + packed_keys(len) * D / 2;
    for (int64_t q0 = 0; q0 < total; q0 += QB) {
        const uint32_t *qs[QUERY_REGS / 4];
        float *outs[QUERY_REGS / 4], *lses[QUERY_REGS / 4];
        for (int k = 0; k < QB; k++) {  // a short last block repeats its last query into a spare row
            const int64_t idx = q0 + k < total ? q0 + k : total - 1;
            const int64_t row = grp[idx / G], qh = h * G + idx % G;
            qs[k] = (const uint32_t *)(q + (row * Hq + qh) * D);
            outs[k] = q0 + k < total ? shared + (row * Hq + qh) * D : spare;
            lses[k] = q0 + k < total ? shared_lse + row * Hq + qh : &spare_lse;
        }
        attend_packed(qs, lims, len, packed, vp, scale, NULL, outs, lses, NV, QB);
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
    int64_t longest = 0;
    for (int64_t g = 0; g < n_groups; g++) longest = shared_pages[g] > longest ? shared_pages[g] : longest;
    const size_t scratch = (size_t)(packed_keys(longest * page_size) * D) * sizeof(uint32_t);
    int failed = 0;
#pragma omp parallel num_threads(num_threads)
    {
        const unsigned int csr = flush_denormals();
        uint32_t *packed = aligned_alloc(64, (scratch + 63) / 64 * 64);  // one group's packed rows at a time
        if (!packed) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < n_groups * Hkv; item++) {
            if (!packed) continue;
            const int64_t g = item / Hkv, h = item % Hkv;
            const int64_t *grp = rows + offsets[g], n_rows = offsets[g + 1] - offsets[g];
            const char *kh = (const char *)k_cache + (size_t)(h * D) * 2;
            const char *vh = (const char *)v_cache + (size_t)(h * D) * 2;
            const int64_t *pg = pages + grp[0] * max_pages, len = shared_pages[g] * page_size;
            if (D == 64)
                attend_group_vec(q, kh, vh, pg, len, grp, n_rows, h, G, Hq, page_size, slot_stride, scale, packed,
                                 shared, shared_lse, 4);
            else
                attend_group_vec(q, kh, vh, pg, len, grp, n_rows, h, G, Hq, page_size, slot_stride, scale, packed,
                                 shared, shared_lse, 8);
        }
        free(packed);
        _mm_setcsr(csr);
    }
    return failed ? 2 : 0;
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
