// The kernels a decode graph replays (graph.c), declared once: their definitions include this header too, so the
// compiler checks every call graph.c makes against the real signature. Each returns 0 when done, else nonzero.
#ifndef SPRIG_KERNELS_H
#define SPRIG_KERNELS_H
#include <stdint.h>

int rms_norm(const void *x, const void *residual, void *out, void *sum_out, const void *weight, int64_t A,
             int64_t B, int64_t N, int64_t sxa, int64_t sxb, int64_t sra, int64_t srb, float eps, int dtype,
             int res_dtype, int num_threads);
int rotary_embedding(void *q, void *k, const int64_t *positions, const float *cache, int64_t T, int64_t Hq,
                     int64_t sq0, int64_t sq1, int64_t Hk, int64_t sk0, int64_t sk1, int64_t D, int64_t max_pos,
                     int dtype, int num_threads);
int hadamard_rotate(void *x, int64_t T, int64_t H, int64_t s0, int64_t s1, int64_t D, int dtype,
                    int num_threads);
int silu_and_mul(const void *x, void *out, int64_t R, int64_t I, int64_t sx, int dtype, int num_threads);
int store_kv(void *k_cache, void *v_cache, const int64_t *slots, const void *k, const void *v, int64_t T,
             int64_t H, int64_t D, int64_t sk0, int64_t sk1, int64_t sv0, int64_t sv1, int64_t num_slots,
             int dtype, int num_threads, int kv_dtype, void *k_scale, void *v_scale);
int paged_decode_attention(const void *q, const void *k_cache, const void *v_cache, void *out,
                           const int64_t *pages, const int64_t *lens, int64_t B, int64_t max_pages, int64_t Hq,
                           int64_t Hkv, int64_t D, int64_t page_size, float scale, int dtype, int num_threads,
                           const int64_t *rows, const int64_t *offsets, const int64_t *shared_pages,
                           int64_t n_groups, int kv_dtype, const void *k_scale, const void *v_scale);
// bf16 linears; out_dtype 0 writes fp32 outputs (the LM head), 1 bf16.
int amx_linear_bf16(const uint16_t *a, const uint16_t *w_packed, const uint16_t *bias, void *out, int64_t m,
                    int64_t n, int64_t k, int out_dtype, int nthreads);
int vec_linear_bf16(const uint16_t *a, const uint16_t *w_packed, const uint16_t *bias, void *out, int64_t m,
                    int64_t n, int64_t k, int isa, int out_dtype, int nthreads);
int vec_gemm_best_isa(void);
// One work item of vec_linear_bf16: output panels [16 * GROUP * g, 16 * GROUP * (g + 1)), on the calling thread.
void vec_linear_bf16_group(const uint16_t *a, const uint16_t *w_packed, const uint16_t *bias, void *out, int64_t m,
                           int64_t n, int64_t k, int isa, int out_dtype, int64_t g);
int int8_linear(const void *a, int64_t lda, const int8_t *w_packed, const int32_t *corr, const float *wscale,
                const float *bias, void *out, int64_t m, int64_t n, int64_t k, int dtype, int out_dtype, int isa,
                int nthreads);
// out_dtype as in the bf16 linears above: the LM head's fp32 logits, however the weight is stored.
int bq_linear(const void *a, int64_t lda, const uint8_t *w, int64_t row_bytes, int qtype, const void *bias, void *out,
              int64_t m, int64_t n, int64_t k, int dtype, int out_dtype, int isa, int nthreads);
int bq_embedding(void *out, const uint8_t *w, int64_t row_bytes, int qtype, const int64_t *ids, int64_t count,
                 int64_t k, int64_t num_rows, int dtype, int nthreads);
// The segmented LoRA product added to y (lora.c).
int lora_apply(const void *x, int64_t ldx, void *y, int64_t ldy, const void *a_t, const void *b_t,
               const int64_t *ranks, const int64_t *slots, const int64_t *parts, int64_t P, int64_t T, int64_t K,
               int64_t N, int64_t R, int64_t NB, int64_t num_slots, int dtype, int wdtype, int isa, int nthreads);

#endif
