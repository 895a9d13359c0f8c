// A decode step replayed from a recorded list of kernel calls: the CPU's counterpart of a CUDA graph.
//
// runtime/model/cpu_graph.py runs one decode forward with every C-kernel call recorded (the kernel, its integer and
// pointer arguments, its float arguments) and the few torch ops of a forward (the embedding lookup, row gathers,
// copies into contiguous tensors) translated into the two helpers below. Replaying the list is one call from
// Python instead of ~10 Python wrappers per layer, each of which costs more than its kernel at batch 1.
#include <stdint.h>
#include <string.h>

#include "kernels.h"

#define GRAPH_INTS 24
#define GRAPH_FLOATS 2
#define COPY_DIMS 4

typedef struct {
    int64_t kernel;  // index into KERNELS
    int64_t i[GRAPH_INTS];  // integer and pointer arguments, in order
    double f[GRAPH_FLOATS];  // float arguments, in order
} GraphCall;

// dst [n0, n1, n2, n3] contiguous <- src with element strides s0..s3 (what `.contiguous()` of a view does).
static int copy_strided(char *dst, const char *src, const int64_t *n, const int64_t *s, int64_t esize) {
    for (int64_t a = 0; a < n[0]; a++)
        for (int64_t b = 0; b < n[1]; b++)
            for (int64_t c = 0; c < n[2]; c++) {
                const char *row = src + (a * s[0] + b * s[1] + c * s[2]) * esize;
                if (s[3] == 1) {
                    memcpy(dst, row, (size_t)(n[3] * esize));
                    dst += n[3] * esize;
                    continue;
                }
                for (int64_t d = 0; d < n[3]; d++, dst += esize) memcpy(dst, row + d * s[3] * esize, (size_t)esize);
            }
    return 0;
}

// out[r] = src[idx[r]] for rows of `row_bytes`, src rows `stride` bytes apart (an embedding or index_select).
static int gather_rows(char *out, const char *src, const int64_t *idx, int64_t rows, int64_t row_bytes,
                       int64_t stride, int64_t num_src_rows) {
    for (int64_t r = 0; r < rows; r++) {
        if (idx[r] < 0 || idx[r] >= num_src_rows) return 1;
        memcpy(out + r * row_bytes, src + idx[r] * stride, (size_t)row_bytes);
    }
    return 0;
}

#define P(k) ((void *)(intptr_t)c->i[k])
#define I(k) (c->i[k])
#define N(k) ((int)c->i[k])
#define F(k) ((float)c->f[k])

static int call_copy(const GraphCall *c) { return copy_strided(P(0), P(1), &c->i[2], &c->i[2 + COPY_DIMS], I(10)); }
static int call_gather(const GraphCall *c) { return gather_rows(P(0), P(1), P(2), I(3), I(4), I(5), I(6)); }
static int call_rms_norm(const GraphCall *c) {
    return rms_norm(P(0), P(1), P(2), P(3), P(4), I(5), I(6), I(7), I(8), I(9), I(10), I(11), F(0), N(12), N(13),
                    N(14));
}
static int call_rotary(const GraphCall *c) {
    return rotary_embedding(P(0), P(1), P(2), P(3), I(4), I(5), I(6), I(7), I(8), I(9), I(10), I(11), I(12), N(13),
                            N(14));
}
static int call_hadamard(const GraphCall *c) {
    return hadamard_rotate(P(0), I(1), I(2), I(3), I(4), I(5), N(6), N(7));
}
static int call_silu(const GraphCall *c) { return silu_and_mul(P(0), P(1), I(2), I(3), I(4), N(5), N(6)); }
static int call_store_kv(const GraphCall *c) {
    return store_kv(P(0), P(1), P(2), P(3), P(4), I(5), I(6), I(7), I(8), I(9), I(10), I(11), I(12), N(13), N(14),
                    N(15), P(16), P(17));
}
static int call_attention(const GraphCall *c) {
    return paged_decode_attention(P(0), P(1), P(2), P(3), P(4), P(5), I(6), I(7), I(8), I(9), I(10), I(11), F(0),
                                  N(12), N(13), P(14), P(15), P(16), I(17), N(18), P(19), P(20));
}
static int call_amx_linear(const GraphCall *c) {
    return amx_linear_bf16(P(0), P(1), P(2), P(3), I(4), I(5), I(6), N(7), N(8));
}
static int call_vec_linear(const GraphCall *c) {
    return vec_linear_bf16(P(0), P(1), P(2), P(3), I(4), I(5), I(6), N(7), N(8), N(9));
}
static int call_int8_linear(const GraphCall *c) {
    return int8_linear(P(0), I(1), P(2), P(3), P(4), P(5), P(6), I(7), I(8), I(9), N(10), N(11), N(12),
                       N(13));
}
static int call_bq_linear(const GraphCall *c) {
    return bq_linear(P(0), I(1), P(2), I(3), N(4), P(5), P(6), I(7), I(8), I(9), N(10), N(11), N(12), N(13));
}
static int call_bq_embedding(const GraphCall *c) {
    return bq_embedding(P(0), P(1), I(2), N(3), P(4), I(5), I(6), I(7), N(8), N(9));
}
static int call_lora(const GraphCall *c) {
    return lora_apply(P(0), I(1), P(2), I(3), P(4), P(5), P(6), P(7), P(8), I(9), I(10), I(11), I(12), I(13), I(14),
                      I(15), N(16), N(17), N(18), N(19));
}

static const struct {
    const char *name;
    int (*call)(const GraphCall *);
} KERNELS[] = {
    {"graph_copy", call_copy},
    {"graph_gather", call_gather},
    {"rms_norm", call_rms_norm},
    {"rotary_embedding", call_rotary},
    {"hadamard_rotate", call_hadamard},
    {"silu_and_mul", call_silu},
    {"store_kv", call_store_kv},
    {"paged_decode_attention", call_attention},
    {"amx_linear_bf16", call_amx_linear},
    {"vec_linear_bf16", call_vec_linear},
    {"int8_linear", call_int8_linear},
    {"bq_linear", call_bq_linear},
    {"bq_embedding", call_bq_embedding},
    {"lora_apply", call_lora},
};
#define NUM_KERNELS ((int64_t)(sizeof KERNELS / sizeof KERNELS[0]))

// The index a recorded call of kernel `name` carries, or -1 when graphs cannot replay that kernel.
int graph_kernel_id(const char *name) {
    for (int64_t k = 0; k < NUM_KERNELS; k++)
        if (strcmp(KERNELS[k].name, name) == 0) return (int)k;
    return -1;
}

// The size of one recorded call, so the Python side can check its struct layout against this one.
int graph_call_size(void) { return (int)sizeof(GraphCall); }

// Run the calls in order; 0 when all succeed, else 1 + the index of the first that did not.
int run_graph(const GraphCall *calls, int64_t n) {
    for (int64_t k = 0; k < n; k++) {
        const int64_t id = calls[k].kernel;
        if (id < 0 || id >= NUM_KERNELS || KERNELS[id].call(&calls[k]) != 0) return (int)k + 1;
    }
    return 0;
}
