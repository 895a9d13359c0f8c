// e^x on 16 floats (AVX-512), shared by sprig's C kernels: the softmax of decode attention and SiLU.
#ifndef SPRIG_VEC_EXP_H
#define SPRIG_VEC_EXP_H
#include <immintrin.h>

// e^x over the whole float range (inf above ~88.7, 0 below ~-103.9): x = n ln2 + f with a two-part ln2 so f is
// exact, e^f by a degree-7 Taylor polynomial on |f| <= ln2/2 (error < 1 ulp before the final scale).
static inline __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
    const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    f = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), f);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}
// e^x of masked (-inf) and far-below-maximum scores is denormal, and every arithmetic op on a denormal takes a
// microcode assist (~100 cycles): kernels flush them to zero (FTZ, DAZ) in each of their threads, which makes
// those exponentials exactly 0. Returns the MXCSR to restore.
static inline unsigned int flush_denormals(void) {
    const unsigned int csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040);
    return csr;
}
#endif
