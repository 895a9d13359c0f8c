// Decode rows that share leading pages through the radix tree, attended once per group (vec_attention.c).
#ifndef SPRIG_VEC_ATTENTION_H
#define SPRIG_VEC_ATTENTION_H
#include <stdint.h>

#define MIN_SHARED_TOKENS 64  // shorter common prefixes are not worth a separate pass (as in kernels/attention.py)

// 0 when this build has the vector paths below (AVX512_BF16), else 1.
int vec_attention_available(void);

// Groups of the decode rows (B rows, page tables pages[B, max_pages], keys lens[B]) in the layout of
// attend_prefix_groups (amx_attention.h); `taken` is B bytes of scratch. Returns the number of groups.
int find_groups(const int64_t *pages, const int64_t *lens, int64_t B, int64_t max_pages, int64_t page_size,
                int64_t *rows, int64_t *offsets, int64_t *shared_pages, char *taken);

// attend_prefix_groups on vector units (AVX512_BF16, bf16, head size 64 or 128); nonzero where it cannot run.
int attend_groups_vec(const uint16_t *q, const void *k_cache, const void *v_cache, const int64_t *pages,
                      int64_t max_pages, const int64_t *rows, const int64_t *offsets, const int64_t *shared_pages,
                      int64_t n_groups, int64_t Hq, int64_t Hkv, int64_t D, int64_t page_size, float scale,
                      float *shared, float *shared_lse, int num_threads);

// extend_attention_amx (amx_attention.h) on vector units (vec_extend.c: AVX512_BF16, head size 64 or 128), over a
// bf16 pool (kv_dtype 1) or one of one-byte codes with their bf16 scales (kv_dtype 3-5, kv_quant.h); nonzero where
// it cannot run.
int extend_attention_vec(const uint16_t *q, int64_t q_stride, const void *k_cache, const void *v_cache,
                         uint16_t *out, const int64_t *pages, int64_t max_pages, const int64_t *starts,
                         const int64_t *ext_lens, const int64_t *prefix_lens, int64_t n_seqs, int64_t Hq, int64_t Hkv,
                         int64_t D, int64_t page_size, float scale, int num_threads, int kv_dtype,
                         const uint16_t *k_scale, const uint16_t *v_scale);
#endif
