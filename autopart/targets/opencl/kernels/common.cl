/* Shared definitions.
 *
 * On PoCL's CPU device the OpenCL builtins (vload/vstore, min, max, clamp, ...) are
 * out-of-line calls, and every call spills the vector registers. Kernels therefore use the
 * inline macros below: unaligned vector access through an under-aligned vector type (clang
 * emits plain unaligned moves) and min/max as selects. MAXF/MINF propagate NaN like numpy. */
typedef float floatu8 __attribute__((ext_vector_type(8), aligned(4)));
typedef float floatu4 __attribute__((ext_vector_type(4), aligned(4)));
#define LOAD8(p) (*(const __global floatu8*)(p))
#define STORE8(v, p) (*(__global floatu8*)(p) = (v))
#define LOAD4(p) (*(const __global floatu4*)(p))
#define STORE4(v, p) (*(__global floatu4*)(p) = (v))
#define MAXF(a, b) ((a) > (b) || (a) != (a) ? (a) : (b))
#define MINF(a, b) ((a) < (b) || (a) != (a) ? (a) : (b))
#define MAXI(a, b) ((a) > (b) ? (a) : (b))
#define MINI(a, b) ((a) < (b) ? (a) : (b))
#define RELU(a) ((a) < 0.0f ? 0.0f : (a))
#define RELU8(v) ((v) < (float8)0.0f ? (float8)0.0f : (v))

typedef union {
    float8 v;
    float s[8];
} float8_parts;
#define ABSF(a) ((a) < 0.0f ? -(a) : (a))

/* Compensated (Kahan) summation: `lost` keeps the low-order bits the last addition to `sum`
 * dropped. A float sum of n terms added one by one drifts by up to n float spacings (a
 * mean over 45,632 positive values: 2e-4 relative); compensated, by about one. */
#define KAHAN_ADD(sum, lost, v)              \
    do {                                     \
        const float kahan_y = (v) - (lost);  \
        const float kahan_t = (sum) + kahan_y; \
        (lost) = (kahan_t - (sum)) - kahan_y; \
        (sum) = kahan_t;                     \
    } while (0)
#define CLAMPF(a, lo, hi) MINF(MAXF(a, lo), hi)

/* Taps k in [tap_lo, tap_hi) of a window starting at `start` with dilation D land inside
 * [lower, upper). */
inline int tap_lo(const int start, const int lower, const int D)
{
    return start < lower ? (lower - start + D - 1) / D : 0;
}
inline int tap_hi(const int start, const int upper, const int K, const int D)
{
    const int last = upper - 1 - start;
    return last < 0 ? 0 : MINI(K, last / D + 1);
}
