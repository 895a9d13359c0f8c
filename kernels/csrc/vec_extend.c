// Prefill and extend attention on vector units (AVX512_BF16, bf16 pool, head size 64 or 128), the counterpart of
// extend_attention_amx on CPUs without AMX: each sequence's new tokens attend causally to its cached and new keys.
// The keys and values of each (sequence, kv head) are packed once (packed_kv.h), then every block of its queries
// reads them from L2: 4 sequences x 128 tokens over 512 cached, one layer, one thread, 12.6 -> 8.7 ms against
// attending the pool rows in place. A quantized pool (int8 / fp8 codes) is dequantized to bf16 while packing.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "decode_vec.h"
#include "packed_kv.h"
#include "vec_attention.h"

#ifdef __AVX512BF16__
// Queries q0 .. q0 + nq of one sequence's (new token, query head of kv head h), numbered token-major.
static inline __attribute__((always_inline)) void extend_block(
    const uint16_t *q, int64_t q_stride, uint16_t *out, const uint32_t *kt, const uint32_t *vp, int64_t start,
    int64_t prefix, int64_t q0, int nq, int64_t h, int64_t G, int64_t Hq, float scale, const int NV) {
    const int QB = QUERY_REGS / NV;
    const int64_t D = NV * 16;
    const uint32_t *qs[QUERY_REGS / 4];
    uint16_t *outs[QUERY_REGS / 4];
    uint16_t spare[MAX_HEAD] __attribute__((aligned(64)));
    int64_t lims[QUERY_REGS / 4], len = 0;
    for (int k = 0; k < QB; k++) {
        const int64_t idx = q0 + (k < nq ? k : nq - 1), tok = idx / G, qh = h * G + idx % G;
        qs[k] = (const uint32_t *)(q + (start + tok) * q_stride + qh * D);
        outs[k] = k < nq ? out + (start + tok) * Hq * D + qh * D : spare;
        lims[k] = prefix + tok + 1;
        len = lims[k] > len ? lims[k] : len;
    }
    attend_packed(qs, lims, len, kt, vp, scale, outs, NULL, NULL, NV, QB);
}

int extend_attention_vec(const uint16_t *q, int64_t q_stride, const void *k_cache, const void *v_cache,
                         uint16_t *out, const int64_t *pages, int64_t max_pages, const int64_t *starts,
                         const int64_t *ext_lens, const int64_t *prefix_lens, int64_t n_seqs, int64_t Hq, int64_t Hkv,
                         int64_t D, int64_t page_size, float scale, int num_threads, int kv_dtype,
                         const uint16_t *k_scale, const uint16_t *v_scale) {
    if (D != 64 && D != 128) return 1;
    if (kv_dtype != 1 && !(kv_quantized(kv_dtype) && k_scale && v_scale)) return 1;
    const int64_t G = Hq / Hkv, QB = QUERY_REGS / (D / 16);
    const size_t esize = kv_quantized(kv_dtype) ? 1 : 2, slot_stride = (size_t)(Hkv * D) * esize;
    // Packed rows of every (sequence, kv head): keys then values, D 32-bit words per padded key.
    int64_t *offsets = malloc((size_t)(n_seqs + 1) * sizeof(int64_t));
    if (!offsets) return 2;
    offsets[0] = 0;
    int64_t items = 0;  // (sequence, kv head, block of QB queries), numbered in that order
    for (int64_t s = 0; s < n_seqs; s++) {
        const int64_t len = prefix_lens[s] + ext_lens[s];
        offsets[s + 1] = offsets[s] + Hkv * packed_keys(len) * D;
        items += Hkv * ((ext_lens[s] * G + QB - 1) / QB);
    }
    uint32_t *packed = aligned_alloc(64, ((size_t)offsets[n_seqs] * sizeof(uint32_t) + 63) / 64 * 64 + 64);
    if (!packed) {
        free(offsets);
        return 2;
    }
#pragma omp parallel num_threads(num_threads)
    {
        const unsigned int csr = flush_denormals();
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < n_seqs * Hkv; item++) {
            const int64_t s = item / Hkv, h = item % Hkv, len = prefix_lens[s] + ext_lens[s];
            const KVHead keys = {(const char *)k_cache + (size_t)(h * D) * esize, slot_stride, kv_dtype,
                                 k_scale ? k_scale + h : NULL, Hkv};
            const KVHead values = {(const char *)v_cache + (size_t)(h * D) * esize, slot_stride, kv_dtype,
                                   v_scale ? v_scale + h : NULL, Hkv};
            pack_kv(packed + offsets[s] + h * packed_keys(len) * D, &keys, &values, pages + s * max_pages, len,
                    page_size, D);
        }  // the implicit barrier: every block below reads packed rows another thread may have written
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < items; item++) {
            int64_t s = 0, rest = item, blocks = 0;
            for (; s < n_seqs; s++, rest -= Hkv * blocks) {
                blocks = (ext_lens[s] * G + QB - 1) / QB;
                if (rest < Hkv * blocks) break;
            }
            const int64_t h = rest / blocks, q0 = rest % blocks * QB, total = ext_lens[s] * G;
            const int nq = total - q0 < QB ? (int)(total - q0) : (int)QB;
            const int64_t padded = packed_keys(prefix_lens[s] + ext_lens[s]);
            const uint32_t *kt = packed + offsets[s] + h * padded * D, *vp = kt + padded * D / 2;
            if (D == 64)
                extend_block(q, q_stride, out, kt, vp, starts[s], prefix_lens[s], q0, nq, h, G, Hq, scale, 4);
            else
                extend_block(q, q_stride, out, kt, vp, starts[s], prefix_lens[s], q0, nq, h, G, Hq, scale, 8);
        }
        _mm_setcsr(csr);
    }
    free(packed);
    free(offsets);
    return 0;
}
#else
int extend_attention_vec(const uint16_t *q, int64_t q_stride, const void *k_cache, const void *v_cache,
                         uint16_t *out, const int64_t *pages, int64_t max_pages, const int64_t *starts,
                         const int64_t *ext_lens, const int64_t *prefix_lens, int64_t n_seqs, int64_t Hq, int64_t Hkv,
                         int64_t D, int64_t page_size, float scale, int num_threads, int kv_dtype,
                         const uint16_t *k_scale, const uint16_t *v_scale) {
    (void)q, (void)q_stride, (void)k_cache, (void)v_cache, (void)out, (void)pages, (void)max_pages, (void)starts;
    (void)ext_lens, (void)prefix_lens, (void)n_seqs, (void)Hq, (void)Hkv, (void)D, (void)page_size, (void)scale;
    (void)num_threads, (void)kv_dtype, (void)k_scale, (void)v_scale;
    return 1;
}
#endif
