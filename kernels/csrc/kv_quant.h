// The quantized KV cache's codes (kernels/kv_quant.py): one byte per element and one bf16 scale per
// (token, kv head) row, x ~= code * scale, scale = max|x| / QMAX. Scalar conversions shared by the store
// (cpu_elementwise.c) and the decode attention (paged_decode_attention.c); they write the bytes torch writes.
// kv dtype codes: 3 int8, 4 fp8 e4m3fn, 5 fp8 e5m2 (0-2 are the unquantized fp32 / bf16 / fp16).
#ifndef SPRIG_KV_QUANT_H
#define SPRIG_KV_QUANT_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bf16.h"

#define KV_INT8 3
#define KV_E4M3 4
#define KV_E5M2 5
#define KV_MIN_AMAX 1e-20f  // as kv_quant._MIN_AMAX

static inline int kv_quantized(int kv_dtype) { return kv_dtype >= KV_INT8 && kv_dtype <= KV_E5M2; }

static inline float kv_qmax(int kv_dtype) {
    return kv_dtype == KV_INT8 ? 127.0f : kv_dtype == KV_E4M3 ? 448.0f : 57344.0f;
}

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

// |x| (finite, at most the format's largest value) to an fp8 code of `mant` mantissa bits and exponent bias
// `bias`, rounded to nearest even: subnormals by scaling to an integer count of the smallest step, normals by
// rounding the fp32 mantissa (a carry moves into the exponent, which is the right result).
static inline uint8_t fp8_from_abs(float a, int mant, int bias) {
    const float min_normal = ldexpf(1.0f, 1 - bias);
    if (a < min_normal) return (uint8_t)nearbyintf(ldexpf(a, bias - 1 + mant));
    uint32_t u = f32_bits(a);
    const int drop = 23 - mant;
    u += ((1u << (drop - 1)) - 1) + ((u >> drop) & 1u);
    return (uint8_t)((u >> drop) - ((uint32_t)(127 - bias) << mant));
}

static inline uint8_t float_to_fp8(float x, int kv_dtype) {
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    const uint8_t mag = kv_dtype == KV_E4M3 ? fp8_from_abs(fabsf(x), 3, 7) : fp8_from_abs(fabsf(x), 2, 15);
    return sign | mag;
}

static inline float fp8_to_float(uint8_t c, int kv_dtype) {
    const int mant = kv_dtype == KV_E4M3 ? 3 : 2, bias = kv_dtype == KV_E4M3 ? 7 : 15;
    const int e = (c & 0x7f) >> mant, m = c & ((1 << mant) - 1);
    const float mag = e == 0 ? ldexpf((float)m, 1 - bias - mant) : ldexpf(1.0f + ldexpf((float)m, -mant), e - bias);
    return c & 0x80 ? -mag : mag;
}

// One code as a float (without its scale).
static inline float kv_code_to_float(const uint8_t *codes, int64_t i, int kv_dtype) {
    return kv_dtype == KV_INT8 ? (float)((const int8_t *)codes)[i] : fp8_to_float(codes[i], kv_dtype);
}

// Quantize a row of n floats into codes and its bf16 scale, as kv_quant.quantize_kv does.
static inline void kv_quantize_row(uint8_t *codes, uint16_t *scale, const float *x, int64_t n, int kv_dtype) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    const float qmax = kv_qmax(kv_dtype);
    const uint16_t s16 = float_to_bf16((amax > KV_MIN_AMAX ? amax : KV_MIN_AMAX) / qmax);
    const float s = bf16_to_float(s16);
    *scale = s16;
    for (int64_t i = 0; i < n; i++) {
        float y = x[i] / s;
        y = y > qmax ? qmax : y < -qmax ? -qmax : y;
        codes[i] = kv_dtype == KV_INT8 ? (uint8_t)(int8_t)nearbyintf(y) : float_to_fp8(y, kv_dtype);
    }
}
#endif
