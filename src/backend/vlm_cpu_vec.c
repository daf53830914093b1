/*
 * The CPU backend's vector kernels: dot products of one weight row (f32,
 * bf16 or f16, widened inside) with up to 4 activation rows, axpy,
 * softmax, the sigmoid-shaped activations (SiLU, QuickGELU, the tanh
 * GELU) and the widening of 16-bit rows; the scalar reference first, then
 * the AVX2/FMA/F16C versions (the activations also AVX-512, the AVX2
 * ones' bits 16 at a time), chosen once per backend from its level
 * (the activations' scalar reference, vlm_act_f, is in vlm_cpu_int.h).
 * The reference for each is the PyTorch expression it replaces in
 * transformers' Qwen2-VL code; tests/test_cpu_matmul.c (the dot
 * products) and tests/test_backend_cpu.c (the others) check them.
 */

#include <math.h>

#include "vlm_cpu_int.h"


/* the kernels of backends created from now on: AVX2 or scalar */
int  vlm_cpu_avx2;
/* and the activations 16 at a time where the level has AVX-512 */
int  vlm_cpu_avx512;


/* dot products of one weight row with up to 4 activation rows */

static void
vlm_dot_f32(const void *wp, const float *x, int xs, int nx, int cols,
    float *out)
{
    int           i, k;
    float         s;
    const float  *w = wp;

    for (i = 0; i < nx; i++) {
        s = 0.0f;
        for (k = 0; k < cols; k++) {
            s += w[k] * x[(size_t) i * xs + k];
        }
        out[i] = s;
    }
}


static void
vlm_axpy(float *y, float a, const float *x, int n)
{
    int  k;

    for (k = 0; k < n; k++) {
        y[k] += a * x[k];
    }
}


/* scale > 0: the max of the scaled values is the scaled max, exactly */
static void
vlm_softmax(float *x, int n, float scale)
{
    int    j;
    float  m, sum;

    m = -INFINITY;
    for (j = 0; j < n; j++) {
        m = x[j] > m ? x[j] : m;
    }

    m *= scale;
    sum = 0.0f;
    for (j = 0; j < n; j++) {
        x[j] = expf(x[j] * scale - m);
        sum += x[j];
    }

    sum = 1.0f / sum;
    for (j = 0; j < n; j++) {
        x[j] *= sum;
    }
}


static void
vlm_dot_bf16(const void *wp, const float *x, int xs, int nx, int cols,
    float *out)
{
    int              i, k;
    float            s;
    const uint16_t  *w = wp;

    for (i = 0; i < nx; i++) {
        s = 0.0f;
        for (k = 0; k < cols; k++) {
            s += vlm_bf16_to_f32(w[k]) * x[(size_t) i * xs + k];
        }
        out[i] = s;
    }
}


static void
vlm_dot_f16(const void *wp, const float *x, int xs, int nx, int cols,
    float *out)
{
    int              i, k;
    float            s;
    const uint16_t  *w = wp;

    for (i = 0; i < nx; i++) {
        s = 0.0f;
        for (k = 0; k < cols; k++) {
            s += vlm_f16_to_f32(w[k]) * x[(size_t) i * xs + k];
        }
        out[i] = s;
    }
}


#if (VLM_X86)

#include "vlm_cpu_x86.h"

#define VLM_AVX2  __attribute__((target("avx2,fma,f16c")))


VLM_AVX2 static inline float
vlm_hsum256(__m256 v)
{
    __m128  lo, hi;

    lo = _mm256_castps256_ps128(v);
    hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));

    return _mm_cvtss_f32(lo);
}


VLM_AVX2 static inline __m256
vlm_load8(const void *w, vlm_dtype_t dt, int k)
{
    __m128i  h;

    if (dt == VLM_DTYPE_F32) {
        return _mm256_loadu_ps((const float *) w + k);
    }

    h = _mm_loadu_si128((const __m128i *) ((const uint16_t *) w + k));

    if (dt == VLM_DTYPE_BF16) {
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }

    return _mm256_cvtph_ps(h);
}


VLM_AVX2 static inline float
vlm_load1(const void *w, vlm_dtype_t dt, int k)
{
    if (dt == VLM_DTYPE_F32) {
        return ((const float *) w)[k];
    }

    return dt == VLM_DTYPE_BF16 ? vlm_bf16_to_f32(((const uint16_t *) w)[k])
                                : vlm_f16_to_f32(((const uint16_t *) w)[k]);
}


VLM_AVX2 static inline void
vlm_dot_avx2(const void *w, vlm_dtype_t dt, const float *x, int xs, int nx,
    int cols, float *out)
{
    int      i, k;
    __m256   acc[4], wv;
    float    tail;

    for (i = 0; i < 4; i++) {
        acc[i] = _mm256_setzero_ps();
    }

    k = 0;

    if (nx == 1) {
        /* one row: four independent chains hide the FMA latency */
        for ( /* void */ ; k + 32 <= cols; k += 32) {
            acc[0] = _mm256_fmadd_ps(vlm_load8(w, dt, k),
                                     _mm256_loadu_ps(x + k), acc[0]);
            acc[1] = _mm256_fmadd_ps(vlm_load8(w, dt, k + 8),
                                     _mm256_loadu_ps(x + k + 8), acc[1]);
            acc[2] = _mm256_fmadd_ps(vlm_load8(w, dt, k + 16),
                                     _mm256_loadu_ps(x + k + 16), acc[2]);
            acc[3] = _mm256_fmadd_ps(vlm_load8(w, dt, k + 24),
                                     _mm256_loadu_ps(x + k + 24), acc[3]);
        }

        acc[0] = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]),
                               _mm256_add_ps(acc[2], acc[3]));
        acc[1] = acc[2] = acc[3] = _mm256_setzero_ps();
    }

    for ( /* void */ ; k + 8 <= cols; k += 8) {
        wv = vlm_load8(w, dt, k);

        for (i = 0; i < nx; i++) {
            acc[i] = _mm256_fmadd_ps(wv,
                         _mm256_loadu_ps(x + (size_t) i * xs + k), acc[i]);
        }
    }

    for (i = 0; i < nx; i++) {
        out[i] = vlm_hsum256(acc[i]);
    }

    for ( /* void */ ; k < cols; k++) {
        tail = vlm_load1(w, dt, k);

        for (i = 0; i < nx; i++) {
            out[i] += tail * x[(size_t) i * xs + k];
        }
    }
}


VLM_AVX2 static void
vlm_dot_f32_avx2(const void *w, const float *x, int xs, int nx, int cols,
    float *out)
{
    vlm_dot_avx2(w, VLM_DTYPE_F32, x, xs, nx, cols, out);
}


VLM_AVX2 static void
vlm_dot_bf16_avx2(const void *w, const float *x, int xs, int nx, int cols,
    float *out)
{
    vlm_dot_avx2(w, VLM_DTYPE_BF16, x, xs, nx, cols, out);
}


VLM_AVX2 static void
vlm_dot_f16_avx2(const void *w, const float *x, int xs, int nx, int cols,
    float *out)
{
    vlm_dot_avx2(w, VLM_DTYPE_F16, x, xs, nx, cols, out);
}


VLM_AVX2 static void
vlm_axpy_avx2(float *y, float a, const float *x, int n)
{
    int     k;
    __m256  av;

    av = _mm256_set1_ps(a);

    for (k = 0; k + 8 <= n; k += 8) {
        _mm256_storeu_ps(y + k, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + k),
                                                _mm256_loadu_ps(y + k)));
    }

    for ( /* void */ ; k < n; k++) {
        y[k] += a * x[k];
    }
}


/* expf for x <= 0 (Cephes' polynomial, about 1 ulp) */
VLM_AVX2 static inline __m256
vlm_exp_avx2(__m256 x)
{
    __m256   fx, y, z;
    __m256i  e;

    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504f),
                                         _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    z = _mm256_mul_ps(x, x);

    y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, z, _mm256_add_ps(x, _mm256_set1_ps(1.0f)));

    e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx),
                                           _mm256_set1_epi32(127)), 23);

    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}


VLM_AVX2 static void
vlm_softmax_avx2(float *x, int n, float scale)
{
    int     j;
    float   m, sum, buf[8];
    __m256  mv, sv, kv, v;

    mv = _mm256_set1_ps(-INFINITY);
    for (j = 0; j + 8 <= n; j += 8) {
        mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + j));
    }

    _mm256_storeu_ps(buf, mv);
    m = -INFINITY;
    for (j = 0; j < 8; j++) {
        m = buf[j] > m ? buf[j] : m;
    }
    for (j = n & ~7; j < n; j++) {
        m = x[j] > m ? x[j] : m;
    }

    m *= scale;
    mv = _mm256_set1_ps(m);
    kv = _mm256_set1_ps(scale);
    sv = _mm256_setzero_ps();

    for (j = 0; j + 8 <= n; j += 8) {
        v = vlm_exp_avx2(_mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j),
                                                     kv), mv));
        _mm256_storeu_ps(x + j, v);
        sv = _mm256_add_ps(sv, v);
    }

    sum = vlm_hsum256(sv);
    for ( /* void */ ; j < n; j++) {
        x[j] = expf(x[j] * scale - m);
        sum += x[j];
    }

    sv = _mm256_set1_ps(1.0f / sum);
    for (j = 0; j + 8 <= n; j += 8) {
        _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), sv));
    }
    for ( /* void */ ; j < n; j++) {
        x[j] *= 1.0f / sum;
    }
}


/*
 * y[k] = x[k] sigmoid(a x[k]) (up[k]), 8 at a time: SiLU (a = 1),
 * QuickGELU (a = 1.702) and the tanh GELU (0.5 (1 + tanh u) is
 * sigmoid(2 u)); sigmoid from exp(-|z|), which stays at or below 1
 */
VLM_AVX2 void
vlm_cpu_act_sigmoid_avx2(float *y, const float *x, const float *up, size_t n,
    vlm_act_t act)
{
    size_t  k;
    __m256  v, z, t, one, pos, s, c1, c3;

    one = _mm256_set1_ps(1.0f);
    c1 = _mm256_set1_ps(act == VLM_ACT_SILU ? 1.0f
                        : act == VLM_ACT_QUICK_GELU ? 1.702f
                        : 2.0f * 0.79788456080286536f);
    c3 = _mm256_set1_ps(act == VLM_ACT_GELU_TANH
                        ? 2.0f * 0.79788456080286536f * 0.044715f : 0.0f);

    for (k = 0; k + 8 <= n; k += 8) {
        v = _mm256_loadu_ps(x + k);
        z = _mm256_mul_ps(v, _mm256_fmadd_ps(_mm256_mul_ps(c3, v), v, c1));

        /* exp(-|z|): the sign bit set */
        t = vlm_exp_avx2(_mm256_or_ps(z, _mm256_set1_ps(-0.0f)));
        pos = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_GE_OQ);
        s = _mm256_div_ps(_mm256_blendv_ps(t, one, pos),
                          _mm256_add_ps(one, t));
        v = _mm256_mul_ps(v, s);

        if (up != NULL) {
            v = _mm256_mul_ps(v, _mm256_loadu_ps(up + k));
        }

        _mm256_storeu_ps(y + k, v);
    }

    for ( /* void */ ; k < n; k++) {
        y[k] = vlm_act_f(x[k], act) * (up != NULL ? up[k] : 1.0f);
    }
}


/*
 * vlm_cpu_act_sigmoid_avx2 16 at a time, the tail through it: every
 * element the bits of the AVX2 kernel's
 */
VLM_AVX512 void
vlm_cpu_act_sigmoid_512(float *y, const float *x, const float *up, size_t n,
    vlm_act_t act)
{
    size_t     k;
    __m512     v, z, t, one, s, c1, c3;
    __mmask16  pos;

    one = _mm512_set1_ps(1.0f);
    c1 = _mm512_set1_ps(act == VLM_ACT_SILU ? 1.0f
                        : act == VLM_ACT_QUICK_GELU ? 1.702f
                        : 2.0f * 0.79788456080286536f);
    c3 = _mm512_set1_ps(act == VLM_ACT_GELU_TANH
                        ? 2.0f * 0.79788456080286536f * 0.044715f : 0.0f);

    for (k = 0; k + 16 <= n; k += 16) {
        v = _mm512_loadu_ps(x + k);
        z = _mm512_mul_ps(v, _mm512_fmadd_ps(_mm512_mul_ps(c3, v), v, c1));

        t = vlm_exp_512(_mm512_or_ps(z, _mm512_set1_ps(-0.0f)));
        pos = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GE_OQ);
        s = _mm512_div_ps(_mm512_mask_blend_ps(pos, t, one),
                          _mm512_add_ps(one, t));
        v = _mm512_mul_ps(v, s);

        if (up != NULL) {
            v = _mm512_mul_ps(v, _mm512_loadu_ps(up + k));
        }

        _mm512_storeu_ps(y + k, v);
    }

    _mm256_zeroupper();

    vlm_cpu_act_sigmoid_avx2(y + k, x + k, up != NULL ? up + k : NULL,
                             n - k, act);
}


VLM_AVX2 void
vlm_cpu_widen_avx2(float *dst, const void *src, vlm_dtype_t dt, size_t n)
{
    size_t  k;

    for (k = 0; k + 8 <= n; k += 8) {
        _mm256_storeu_ps(dst + k, vlm_load8(src, dt, (int) k));
    }

    for ( /* void */ ; k < n; k++) {
        dst[k] = vlm_load1(src, dt, (int) k);
    }
}

#endif


/* the scalar kernels, or where the backend's level has AVX2 the AVX2 ones */
void
vlm_cpu_vec_kernels(vlm_cpu_t *cpu)
{
    vlm_cpu_avx2 = cpu->level >= VLM_CPU_AVX2;
    vlm_cpu_avx512 = cpu->level >= VLM_CPU_AVX512BF16;

    cpu->dot[VLM_DTYPE_F32] = vlm_dot_f32;
    cpu->dot[VLM_DTYPE_BF16] = vlm_dot_bf16;
    cpu->dot[VLM_DTYPE_F16] = vlm_dot_f16;
    cpu->axpy = vlm_axpy;
    cpu->softmax = vlm_softmax;

#if (VLM_X86)
    if (vlm_cpu_avx2) {
        cpu->dot[VLM_DTYPE_F32] = vlm_dot_f32_avx2;
        cpu->dot[VLM_DTYPE_BF16] = vlm_dot_bf16_avx2;
        cpu->dot[VLM_DTYPE_F16] = vlm_dot_f16_avx2;
        cpu->axpy = vlm_axpy_avx2;
        cpu->softmax = vlm_softmax_avx2;
    }
#endif
}
