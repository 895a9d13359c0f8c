// Decode attention over prefixes that several sequences share, on AMX tiles (prefix_attention.c).
#ifndef SPRIG_PREFIX_ATTENTION_H
#define SPRIG_PREFIX_ATTENTION_H
#include <stdint.h>

// Groups of decode rows: rows[offsets[g] .. offsets[g + 1]) share their first shared_pages[g] pages (the page ids
// are read from the table of the group's first row). For every grouped row b and query head h it writes the
// normalized attention over the shared keys to out[(b * Hq + h) * D ...] (fp32) and its log-sum-exp to
// lse[b * Hq + h]. bf16 only. Returns 0 when done, nonzero when it cannot run here (no AMX, D not 64 or 128).
int attend_prefix_groups(const uint16_t *q, const uint16_t *k_cache, const uint16_t *v_cache, const int64_t *pages,
                         int64_t max_pages, const int64_t *rows, const int64_t *offsets, const int64_t *shared_pages,
                         int64_t n_groups, int64_t Hq, int64_t Hkv, int64_t D, int64_t page_size, float scale,
                         float *out, float *lse, int num_threads);
#endif
