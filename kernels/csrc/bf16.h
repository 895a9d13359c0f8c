// bf16 <-> float conversions shared by sprig's C kernels (scalar paths; the vector paths shift 16-bit lanes).
#ifndef SPRIG_BF16_H
#define SPRIG_BF16_H
#include <stdint.h>
#include <string.h>

static inline float bf16_to_float(uint16_t x) {
    uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN, as torch writes it
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even, as torch does
    return (uint16_t)(u >> 16);
}
#endif
