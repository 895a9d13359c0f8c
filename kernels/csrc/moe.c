/* Mixture-of-experts feed-forward in one call: route, group tokens by expert, one gate_up and one down product per
 * active expert, weighted combine (the torch reference is kernels/moe.py's `fused_moe`).
 *
 * x [T, H] (fp32 or bf16), router logits [T, E] fp32. Routing: softmax over the E logits in fp32, the top_k largest
 * probabilities (ties to the lower expert id), rescaled to sum to 1 when `renorm`. The T * top_k routing slots are
 * sorted by expert (stably), their rows gathered into one contiguous block per expert, so each expert's weight is
 * read once per call whatever the number of its tokens: at decode sizes the call costs what reading the active
 * experts' weights costs.
 *
 * Weights: bf16 ones `vnni_pack`ed per expert (w13 [E][ceil(2I/16)][H/2][16][2], w2 [E][ceil(H/16)][I/2][16][2]),
 * run by vec_gemm.c's panels on code path `isa`; fp32 ones as stored ([E, 2I, H] and [E, H, I]). Both products are
 * split into work items (expert, group of output panels) in one parallel loop each, so a decode step's few active
 * experts spread over every thread. Intermediates are rounded as the reference rounds them (gate_up and the SiLU
 * product in the model dtype), the combine sums in fp32 and rounds once.
 * Returns 0 when done, 1 on bad arguments, 2 when out of memory.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "kernels.h"
#include "panels.h"

#define F32_BLOCK 64 /* output columns per fp32 work item */

/* Each token's top_k experts and weights from its router logits. */
static void route(const float *logits, int64_t T, int64_t E, int64_t top_k, int renorm, int64_t *ids, float *wts,
                  int nthreads) {
#pragma omp parallel for num_threads(nthreads) schedule(static) if (T > 64)
    for (int64_t t = 0; t < T; t++) {
        const float *l = logits + t * E;
        float mx = l[0], sum = 0.0f;
        for (int64_t e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        float probs[E];
        for (int64_t e = 0; e < E; e++) sum += probs[e] = expf(l[e] - mx);
        float picked = 0.0f;
        for (int64_t j = 0; j < top_k; j++) {
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++)
                if (probs[e] >= 0.0f && (best < 0 || probs[e] > probs[best])) best = e;
            ids[t * top_k + j] = best;
            wts[t * top_k + j] = probs[best] / sum;
            picked += wts[t * top_k + j];
            probs[best] = -1.0f;  /* taken */
        }
        if (renorm)
            for (int64_t j = 0; j < top_k; j++) wts[t * top_k + j] /= picked;
    }
}

/* out[m, n] = a[m, k] . w[n, k]^T for output columns [c0, c1), fp32, on the calling thread. */
static void f32_block(const float *a, const float *w, float *out, int64_t m, int64_t n, int64_t k, int64_t c0,
                      int64_t c1) {
    for (int64_t c = c0; c < c1; c++) {
        const float *wc = w + c * k;
        for (int64_t r = 0; r < m; r++) {
            const float *ar = a + r * k;
            float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
            for (int64_t i = 0; i < k; i++) acc += ar[i] * wc[i];
            out[r * n + c] = acc;
        }
    }
}

/* For every active expert e (rows [off[e], off[e + 1]) of `a` and `out`): out = a . W_e^T, W_e [n, k] of `w`.
 * Work items are (expert, block of output columns); out_dtype 0 fp32, 1 bf16 (bf16 weights only). */
static void experts_product(const void *a, const void *w, void *out, const int64_t *off, int64_t E, int64_t n,
                            int64_t k, int bf16, int isa, int out_dtype, int nthreads) {
    const int64_t cols = bf16 ? PANEL * GROUP : F32_BLOCK, blocks = (n + cols - 1) / cols;
    const size_t a_es = bf16 ? 2 : 4, out_es = out_dtype == 1 ? 2 : 4;
    const int64_t expert_bytes = bf16 ? ((n + PANEL - 1) / PANEL) * PANEL * k * 2 : n * k * 4;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) collapse(2)
    for (int64_t e = 0; e < E; e++)
        for (int64_t b = 0; b < blocks; b++) {
            const int64_t m = off[e + 1] - off[e];
            if (m == 0) continue;
            const char *ae = (const char *)a + (size_t)(off[e] * k) * a_es;
            const char *we = (const char *)w + (size_t)e * expert_bytes;
            char *oe = (char *)out + (size_t)(off[e] * n) * out_es;
            if (bf16)
                vec_linear_bf16_group((const uint16_t *)ae, (const uint16_t *)we, NULL, oe, m, n, k, isa, out_dtype,
                                      b);
            else
                f32_block((const float *)ae, (const float *)we, (float *)oe, m, n, k, b * cols,
                          (b + 1) * cols < n ? (b + 1) * cols : n);
        }
}

int moe_fused(const void *x, const float *logits, int64_t T, int64_t E, int64_t top_k, int renorm, const void *w13,
              const void *w2, int64_t H, int64_t I, int dtype, int isa, void *out, int nthreads) {
    if (T < 0 || E < 1 || top_k < 1 || top_k > E || H < 1 || I < 1 || (dtype != 0 && dtype != 1)) return 1;
    if (dtype == 1 && (H % 2 || I % 2 || isa < 0 || isa > vec_gemm_best_isa())) return 1;
    if (T == 0) return 0;
    const int64_t S = T * top_k;
    const size_t es = dtype == 1 ? 2 : 4;
    int64_t *ids = malloc(sizeof(int64_t) * S), *slot_row = malloc(sizeof(int64_t) * S);
    int64_t *off = calloc(E + 1, sizeof(int64_t));
    float *wts = malloc(sizeof(float) * S), *y = malloc(sizeof(float) * S * H);
    char *a = malloc(es * S * H), *gu = malloc(es * S * 2 * I), *h = malloc(es * S * I);
    int status = 0;
    if (!ids || !slot_row || !off || !wts || !y || !a || !gu || !h) {
        status = 2;
        goto done;
    }
    route(logits, T, E, top_k, renorm, ids, wts, nthreads);
    /* Counting sort of the slots by expert: off[e] is expert e's first row, slot_row[s] slot s's row. */
    for (int64_t s = 0; s < S; s++) off[ids[s] + 1]++;
    for (int64_t e = 0; e < E; e++) off[e + 1] += off[e];
    {
        int64_t *next = malloc(sizeof(int64_t) * E);
        if (!next) {
            status = 2;
            goto done;
        }
        memcpy(next, off, sizeof(int64_t) * E);
        for (int64_t s = 0; s < S; s++) slot_row[s] = next[ids[s]]++;
        free(next);
    }
#pragma omp parallel for num_threads(nthreads) schedule(static) if (S * H > 65536)
    for (int64_t s = 0; s < S; s++)
        memcpy(a + (size_t)(slot_row[s] * H) * es, (const char *)x + (size_t)((s / top_k) * H) * es, es * H);
    experts_product(a, w13, gu, off, E, 2 * I, H, dtype, isa, dtype, nthreads);
    silu_and_mul(gu, h, S, I, 2 * I, dtype, nthreads);
    experts_product(h, w2, y, off, E, H, I, dtype, isa, 0, nthreads);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (T * H > 65536)
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < H; c++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < top_k; j++) acc += wts[t * top_k + j] * y[slot_row[t * top_k + j] * H + c];
            if (dtype == 1)
                ((uint16_t *)out)[t * H + c] = float_to_bf16(acc);
            else
                ((float *)out)[t * H + c] = acc;
        }
done:
    free(ids), free(slot_row), free(off), free(wts), free(y), free(a), free(gu), free(h);
    return status;
}
