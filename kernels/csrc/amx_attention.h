// Attention as AMX tile matrix products (amx_attention.c): bf16, head size 64 or 128. Each function returns 0
// when done and nonzero when it could not run here (no AMX, another head size, out of memory): the caller then
// computes the whole result another way.
#ifndef SPRIG_AMX_ATTENTION_H
#define SPRIG_AMX_ATTENTION_H
#include <stdint.h>

// Decode rows sharing leading pages through the radix tree: rows[offsets[g] .. offsets[g + 1]) share their first
// shared_pages[g] pages (the page ids are read from the table of the group's first row). For every grouped row b
// and query head h it writes the normalized attention over the shared keys to out[(b * Hq + h) * D ...] (fp32)
// and its log-sum-exp to lse[b * Hq + h].
int attend_prefix_groups(const uint16_t *q, const uint16_t *k_cache, const uint16_t *v_cache, const int64_t *pages,
                         int64_t max_pages, const int64_t *rows, const int64_t *offsets, const int64_t *shared_pages,
                         int64_t n_groups, int64_t Hq, int64_t Hkv, int64_t D, int64_t page_size, float scale,
                         float *out, float *lse, int num_threads);

// Prefill / extend: sequence s adds ext_lens[s] tokens (rows starts[s] ... of q and out) after prefix_lens[s]
// cached ones; its keys and values, the new ones included, are in the pool at pages[s * max_pages ...]. Causal:
// new token i sees keys [0, prefix_lens[s] + i]. q rows are q_stride elements apart, out rows Hq * D.
int extend_attention_amx(const uint16_t *q, int64_t q_stride, const uint16_t *k_cache, const uint16_t *v_cache,
                         uint16_t *out, const int64_t *pages, int64_t max_pages, const int64_t *starts,
                         const int64_t *ext_lens, const int64_t *prefix_lens, int64_t n_seqs, int64_t Hq, int64_t Hkv,
                         int64_t D, int64_t page_size, float scale, int num_threads);
#endif
