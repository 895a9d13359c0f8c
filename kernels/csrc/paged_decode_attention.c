// Decode attention that reads keys and values in place from the paged KV pool (CPU, OpenMP).
//
// The torch reference gathers every sequence's pages into a padded copy before attending; on a CPU that copy
// runs at a fraction of memory bandwidth and dominates a large decode batch. Here each (sequence, kv head) pair
// walks its page table once, page by page, with an online softmax, so K and V are each read exactly once.
//
// Shapes (all contiguous): q [B, Hq, D]; k_cache, v_cache [num_slots, Hkv, D]; pages [B, max_pages] int64;
// lens [B] int64 (keys per sequence, >= 1); out [B, Hq, D]. Hq = G * Hkv (GQA). dtype: 0 fp32, 1 bf16, 2 fp16.
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_GROUP 32
#define MAX_DIM 256

static inline float bf16_to_float(uint16_t x) {
    uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  // keep NaN a NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even, as torch does
    return (uint16_t)(u >> 16);
}

// Copy n elements of type `dtype` at `src` into floats.
static inline void load_row(float *dst, const void *src, int64_t n, int dtype) {
    if (dtype == 0) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dtype == 1) {
        const uint16_t *s = (const uint16_t *)src;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_float(s[i]);
    } else {
        const _Float16 *s = (const _Float16 *)src;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dst[i] = (float)s[i];
    }
}

static inline void store_row(void *dst, const float *src, int64_t n, int dtype) {
    if (dtype == 0) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dtype == 1) {
        uint16_t *d = (uint16_t *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = float_to_bf16(src[i]);
    } else {
        _Float16 *d = (_Float16 *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = (_Float16)src[i];
    }
}

#define CHUNK 64

// One sequence, one kv head: its G query heads attend to `len` keys spread over `pages`. Keys are scored a chunk
// at a time so the softmax rescale and the exponentials run once per chunk, over contiguous scores.
static void attend_one(const void *q, const void *k_cache, const void *v_cache, void *out, const int64_t *pages,
                       int64_t len, int64_t G, int64_t Hkv, int64_t D, int64_t page_size, float scale,
                       int dtype, size_t esize) {
    float qf[MAX_GROUP][MAX_DIM], acc[MAX_GROUP][MAX_DIM], row[MAX_DIM];
    float s[MAX_GROUP][CHUNK], m[MAX_GROUP], l[MAX_GROUP];
    int64_t slots[CHUNK];
    for (int64_t g = 0; g < G; g++) {
        load_row(qf[g], (const char *)q + (size_t)(g * D) * esize, D, dtype);
        for (int64_t d = 0; d < D; d++) qf[g][d] *= scale;
        memset(acc[g], 0, (size_t)D * sizeof(float));
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    const size_t slot_stride = (size_t)(Hkv * D) * esize;
    for (int64_t t0 = 0; t0 < len; t0 += CHUNK) {
        const int64_t n = len - t0 < CHUNK ? len - t0 : CHUNK;
        for (int64_t j = 0; j < n; j++) {
            const int64_t t = t0 + j;
            slots[j] = pages[t / page_size] * page_size + t % page_size;
            load_row(row, (const char *)k_cache + (size_t)slots[j] * slot_stride, D, dtype);
            for (int64_t g = 0; g < G; g++) {
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (int64_t d = 0; d < D; d++) dot += qf[g][d] * row[d];
                s[g][j] = dot;
            }
        }
        for (int64_t g = 0; g < G; g++) {
            float mx = m[g];
            for (int64_t j = 0; j < n; j++) mx = s[g][j] > mx ? s[g][j] : mx;
            const float c = expf(m[g] - mx);  // rescale what earlier chunks accumulated (0 on the first)
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < n; j++) {
                s[g][j] = expf(s[g][j] - mx);
                sum += s[g][j];
            }
            l[g] = l[g] * c + sum;
            m[g] = mx;
#pragma omp simd
            for (int64_t d = 0; d < D; d++) acc[g][d] *= c;
        }
        for (int64_t j = 0; j < n; j++) {
            load_row(row, (const char *)v_cache + (size_t)slots[j] * slot_stride, D, dtype);
            for (int64_t g = 0; g < G; g++) {
                const float p = s[g][j];
#pragma omp simd
                for (int64_t d = 0; d < D; d++) acc[g][d] += p * row[d];
            }
        }
    }
    for (int64_t g = 0; g < G; g++) {
        const float inv = 1.0f / l[g];
        for (int64_t d = 0; d < D; d++) acc[g][d] *= inv;
        store_row((char *)out + (size_t)(g * D) * esize, acc[g], D, dtype);
    }
}

#ifdef __AVX512F__
#include <immintrin.h>

// 16 elements of `dtype` at p as floats.
static inline __m512 load16(const void *p, int dtype) {
    if (dtype == 0) return _mm512_loadu_ps(p);
    const __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (dtype == 1) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

#define PREFETCH 8

static inline void prefetch_row(const char *p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// e^x for x <= 0 (scores minus their running maximum): 2^(x log2 e) as 2^n * p(f) with a degree-6 polynomial,
// relative error ~2e-7; underflows to 0 below -87 as expf does.
static inline __m512 exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_mul_ps(_mm512_sub_ps(t, n), _mm512_set1_ps(0.69314718055994531f));  // f in ln2*[-.5,.5]
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

// attend_one for D = 16 * NV: K/V rows stay in registers, dot products reduce with a shuffle tree instead of
// a scalar chain, and exponentials run 16 at a time. Inlined per NV so the vector loops fully unroll.
static inline __attribute__((always_inline)) void attend_avx512(
    const void *q, const void *k_cache, const void *v_cache, void *out, const int64_t *pages, int64_t len,
    int64_t G, int64_t Hkv, int64_t page_size, float scale, int dtype, size_t esize, const int NV) {
    __m512 qv[MAX_GROUP][MAX_DIM / 16], acc[MAX_GROUP][MAX_DIM / 16];
    float s[MAX_GROUP][CHUNK] __attribute__((aligned(64))), m[MAX_GROUP], l[MAX_GROUP];
    int64_t slots[CHUNK];
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t g = 0; g < G; g++) {
        for (int i = 0; i < NV; i++) {
            qv[g][i] = _mm512_mul_ps(load16((const char *)q + (size_t)(g * NV * 16 + i * 16) * esize, dtype), sc);
            acc[g][i] = _mm512_setzero_ps();
        }
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    const size_t slot_stride = (size_t)(Hkv * NV * 16) * esize;
    for (int64_t t0 = 0; t0 < len; t0 += CHUNK) {
        const int64_t n = len - t0 < CHUNK ? len - t0 : CHUNK;
        for (int64_t j = 0; j < n; j++) {
            const int64_t t = t0 + j;
            slots[j] = pages[t / page_size] * page_size + t % page_size;
            const char *kp = (const char *)k_cache + (size_t)slots[j] * slot_stride;
            // Pages are scattered, so hardware prefetch cannot run ahead: fetch the key PREFETCH tokens on
            // and this token's value row (read after the chunk's softmax) now.
            prefetch_row((const char *)v_cache + (size_t)slots[j] * slot_stride, NV * 16 * esize);
            if (t + PREFETCH < len) {
                const int64_t u = t + PREFETCH;
                prefetch_row((const char *)k_cache + (size_t)(pages[u / page_size] * page_size + u % page_size) *
                                                          slot_stride, NV * 16 * esize);
            }
            __m512 kr[MAX_DIM / 16];
            for (int i = 0; i < NV; i++) kr[i] = load16(kp + (size_t)(i * 16) * esize, dtype);
            for (int64_t g = 0; g < G; g++) {
                __m512 d = _mm512_mul_ps(qv[g][0], kr[0]);
                for (int i = 1; i < NV; i++) d = _mm512_fmadd_ps(qv[g][i], kr[i], d);
                s[g][j] = _mm512_reduce_add_ps(d);
            }
        }
        for (int64_t j = n; j < (n + 15) / 16 * 16; j++)
            for (int64_t g = 0; g < G; g++) s[g][j] = -INFINITY;  // pad the last vector: e^-inf = 0
        for (int64_t g = 0; g < G; g++) {
            __m512 mx = _mm512_set1_ps(m[g]);
            for (int64_t j = 0; j < n; j += 16) mx = _mm512_max_ps(mx, _mm512_load_ps(&s[g][j]));
            const float new_m = _mm512_reduce_max_ps(mx);
            const __m512 nm = _mm512_set1_ps(new_m);
            __m512 sum = _mm512_setzero_ps();
            for (int64_t j = 0; j < n; j += 16) {
                const __m512 e = exp16(_mm512_sub_ps(_mm512_load_ps(&s[g][j]), nm));
                _mm512_store_ps(&s[g][j], e);
                sum = _mm512_add_ps(sum, e);
            }
            const float c = m[g] == -INFINITY ? 0.0f : expf(m[g] - new_m);
            l[g] = l[g] * c + _mm512_reduce_add_ps(sum);
            m[g] = new_m;
            const __m512 cv = _mm512_set1_ps(c);
            for (int i = 0; i < NV; i++) acc[g][i] = _mm512_mul_ps(acc[g][i], cv);
        }
        for (int64_t j = 0; j < n; j++) {
            const char *vp = (const char *)v_cache + (size_t)slots[j] * slot_stride;
            __m512 vr[MAX_DIM / 16];
            for (int i = 0; i < NV; i++) vr[i] = load16(vp + (size_t)(i * 16) * esize, dtype);
            for (int64_t g = 0; g < G; g++) {
                const __m512 p = _mm512_set1_ps(s[g][j]);
                for (int i = 0; i < NV; i++) acc[g][i] = _mm512_fmadd_ps(p, vr[i], acc[g][i]);
            }
        }
    }
    float row[MAX_DIM] __attribute__((aligned(64)));
    for (int64_t g = 0; g < G; g++) {
        const __m512 inv = _mm512_set1_ps(1.0f / l[g]);
        for (int i = 0; i < NV; i++) _mm512_store_ps(&row[i * 16], _mm512_mul_ps(acc[g][i], inv));
        store_row((char *)out + (size_t)(g * NV * 16) * esize, row, NV * 16, dtype);
    }
}

// The vector path for D in {64, 128} (the common head sizes); returns 0 when it does not apply.
static int attend_fast(const void *q, const void *k_cache, const void *v_cache, void *out, const int64_t *pages,
                       int64_t len, int64_t G, int64_t Hkv, int64_t D, int64_t page_size, float scale, int dtype,
                       size_t esize) {
    if (D == 64)
        attend_avx512(q, k_cache, v_cache, out, pages, len, G, Hkv, page_size, scale, dtype, esize, 4);
    else if (D == 128)
        attend_avx512(q, k_cache, v_cache, out, pages, len, G, Hkv, page_size, scale, dtype, esize, 8);
    else
        return 0;
    return 1;
}
#else
static int attend_fast(const void *q, const void *k_cache, const void *v_cache, void *out, const int64_t *pages,
                       int64_t len, int64_t G, int64_t Hkv, int64_t D, int64_t page_size, float scale, int dtype,
                       size_t esize) {
    return 0;
}
#endif

// Returns 0 on success, 1 when G or D exceed the compiled limits (the caller falls back to torch).
int paged_decode_attention(const void *q, const void *k_cache, const void *v_cache, void *out,
                           const int64_t *pages, const int64_t *lens, int64_t B, int64_t max_pages, int64_t Hq,
                           int64_t Hkv, int64_t D, int64_t page_size, float scale, int dtype, int num_threads) {
    const int64_t G = Hq / Hkv;
    if (G > MAX_GROUP || D > MAX_DIM) return 1;
    const size_t esize = dtype == 0 ? 4 : 2;
#pragma omp parallel for schedule(dynamic, 1) num_threads(num_threads)
    for (int64_t item = 0; item < B * Hkv; item++) {
        const int64_t b = item / Hkv, h = item % Hkv;
        const size_t off = (size_t)((b * Hq + h * G) * D) * esize;
        const char *kh = (const char *)k_cache + (size_t)(h * D) * esize;
        const char *vh = (const char *)v_cache + (size_t)(h * D) * esize;
        const int64_t *pb = pages + b * max_pages;
        if (!attend_fast((const char *)q + off, kh, vh, (char *)out + off, pb, lens[b], G, Hkv, D, page_size,
                         scale, dtype, esize))
            attend_one((const char *)q + off, kh, vh, (char *)out + off, pb, lens[b], G, Hkv, D, page_size, scale,
                       dtype, esize);
    }
    return 0;
}
