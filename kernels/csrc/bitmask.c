// A grammar's token bitmask applied to fp32 logits in place, in one pass that also finds rows left with no
// finite logit (the sampler's fallback case).
//
// The torch path adds a 0/-inf bias gathered per mask byte, then replaces NaNs, then scans the rows for dead
// ones: four passes and two temporaries of the logits' size. Semantics match it: a cleared bit (and every id at
// or past words * 32) becomes -inf, a NaN becomes -inf, anything else is unchanged.
#include <math.h>
#include <stdint.h>

static int apply_row(float *row, int64_t n, const int32_t *mask, int64_t words) {
    int live = 0;
    for (int64_t w = 0; w * 32 < n; w++) {
        const uint32_t bits = w < words ? (uint32_t)mask[w] : 0u;
        const int64_t end = n - w * 32 < 32 ? n - w * 32 : 32;
        float *v = row + w * 32;
        for (int64_t j = 0; j < end; j++) {
            const float x = ((bits >> j) & 1u) && !isnan(v[j]) ? v[j] : -INFINITY;
            v[j] = x;
            live |= x != -INFINITY;
        }
    }
    return live;
}

// logits [rows, n] fp32 (row stride `stride` elements), mask [rows, words] int32 rows of `mask_stride` words;
// dead[r] = 1 where row r has no logit above -inf afterwards, else 0. Returns 0.
int apply_token_bitmask(float *logits, int64_t rows, int64_t n, int64_t stride, const int32_t *mask, int64_t words,
                        int64_t mask_stride, uint8_t *dead, int num_threads) {
#pragma omp parallel for schedule(static) num_threads(rows >= num_threads ? num_threads : 1)
    for (int64_t r = 0; r < rows; r++)
        dead[r] = !apply_row(logits + r * stride, n, mask + r * mask_stride, words);
    return 0;
}
