/* Pooling and local response normalisation, NCHW (one spatial dimension as H = 1). */

#define POOL_MAX 0
#define POOL_AVG_EXCLUDE_PAD 1
#define POOL_AVG_INCLUDE_PAD 2

/* Work-item (oh, n * C + c) produces one output row. Windows start at o * S - P_begin; the
 * average divides by the taps inside the input, or inside [-P_begin, size + P_end) with
 * count_include_pad. */
__kernel void pool2d(
    __global const float* restrict X, __global float* restrict Y,
    const int H, const int W, const int OH, const int OW, const int KH, const int KW,
    const int SH, const int SW, const int PH, const int PW, const int PEH, const int PEW,
    const int DH, const int DW, const int mode)
{
    const int oh = get_global_id(0);
    const int z = get_global_id(1);
    const __global float* x = X + (size_t)z * H * W;
    __global float* y = Y + (size_t)z * OH * OW + (size_t)oh * OW;
    const int h0 = oh * SH - PH;
    const int kh_lo = tap_lo(h0, 0, DH), kh_hi = tap_hi(h0, H, KH, DH);
    int rows = kh_hi - kh_lo;
    if (mode == POOL_AVG_INCLUDE_PAD) rows = tap_hi(h0, H + PEH, KH, DH) - tap_lo(h0, -PH, DH);
    for (int ow = 0; ow < OW; ++ow) {
        const int w0 = ow * SW - PW;
        const int kw_lo = tap_lo(w0, 0, DW), kw_hi = tap_hi(w0, W, KW, DW);
        if (mode == POOL_MAX) {
            float acc = -INFINITY;
            for (int kh = kh_lo; kh < kh_hi; ++kh) {
                const __global float* row = x + (h0 + kh * DH) * W + w0;
                for (int kw = kw_lo; kw < kw_hi; ++kw) acc = MAXF(acc, row[kw * DW]);
            }
            y[ow] = acc;
        } else {
            float acc = 0.0f;
            for (int kh = kh_lo; kh < kh_hi; ++kh) {
                const __global float* row = x + (h0 + kh * DH) * W + w0;
                for (int kw = kw_lo; kw < kw_hi; ++kw) acc += row[kw * DW];
            }
            int cols = kw_hi - kw_lo;
            if (mode == POOL_AVG_INCLUDE_PAD)
                cols = tap_hi(w0, W + PEW, KW, DW) - tap_lo(w0, -PW, DW);
            const int count = rows * cols;
            y[ow] = count > 0 ? acc / (float)count : 0.0f;
        }
    }
}

/* Work-item z = n * C + c reduces the HW values of one channel (mean or max). */
__kernel void global_pool(
    __global const float* restrict X, __global float* restrict Y, const int HW, const int mode)
{
    const int z = get_global_id(0);
    const __global float* x = X + (size_t)z * HW;
    float acc = mode == POOL_MAX ? -INFINITY : 0.0f, lost = 0.0f;
    if (mode == POOL_MAX) {
        for (int i = 0; i < HW; ++i) acc = MAXF(acc, x[i]);
    } else {
        for (int i = 0; i < HW; ++i) KAHAN_ADD(acc, lost, x[i]);
    }
    Y[z] = mode == POOL_MAX ? acc : acc / (float)HW;
}

/* LRN across channels: y = x * (bias + alpha / size * sum of squares in the window)^-beta.
 * Work-item (i, n) slides the channel window over 8 pixels [8 i, 8 i + 8) at once. */
#define LRN_SCALE(base) (beta == 0.75f ? rsqrt(base) * rsqrt(sqrt(base)) : exp(-beta * log(base)))
__kernel void lrn(
    __global const float* restrict X, __global float* restrict Y, const int C, const int HW,
    const int size, const float alpha_over_size, const float beta, const float bias)
{
    const int i0 = get_global_id(0) * 8;
    const int n = get_global_id(1);
    if (i0 >= HW) return;
    const int before = (size - 1) / 2, after = size - 1 - (size - 1) / 2;
    const size_t base = (size_t)n * C * HW + i0;
    const __global float* x = X + base;
    __global float* y = Y + base;
    if (i0 + 8 <= HW) {
        float8 sum = 0.0f;
        for (int k = 0; k < MINI(after, C); ++k) {
            const float8 v = LOAD8(x + (size_t)k * HW);
            sum += v * v;
        }
        for (int c = 0; c < C; ++c) {
            if (c + after < C) {
                const float8 v = LOAD8(x + (size_t)(c + after) * HW);
                sum += v * v;
            }
            if (c - before - 1 >= 0) {
                const float8 v = LOAD8(x + (size_t)(c - before - 1) * HW);
                sum -= v * v;
            }
            const float8 b = bias + alpha_over_size * sum;
            STORE8(LOAD8(x + (size_t)c * HW) * LRN_SCALE(b), y + (size_t)c * HW);
        }
        return;
    }
    for (int j = 0; j < HW - i0; ++j) {
        float sum = 0.0f;
        for (int k = 0; k < MINI(after, C); ++k) {
            const float v = x[(size_t)k * HW + j];
            sum += v * v;
        }
        for (int c = 0; c < C; ++c) {
            if (c + after < C) {
                const float v = x[(size_t)(c + after) * HW + j];
                sum += v * v;
            }
            if (c - before - 1 >= 0) {
                const float v = x[(size_t)(c - before - 1) * HW + j];
                sum -= v * v;
            }
            const float b = bias + alpha_over_size * sum;
            y[(size_t)c * HW + j] = x[(size_t)c * HW + j] * LRN_SCALE(b);
        }
    }
}
