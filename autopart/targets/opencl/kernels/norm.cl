/* Row-wise normalisations. */

/* Softmax over L values spaced `inner` apart: work-item (i, o) handles the row starting at
 * o * L * inner + i. */
__kernel void softmax(
    __global const float* restrict X, __global float* restrict Y, const int L, const int inner)
{
    const int i = get_global_id(0);
    const int o = get_global_id(1);
    const size_t base = (size_t)o * L * inner + i;
    const __global float* x = X + base;
    __global float* y = Y + base;
    float top = -INFINITY;
    for (int k = 0; k < L; ++k) top = MAXF(top, x[(size_t)k * inner]);
    float sum = 0.0f, lost = 0.0f;
    for (int k = 0; k < L; ++k) {
        const float e = exp(x[(size_t)k * inner] - top);
        y[(size_t)k * inner] = e;
        KAHAN_ADD(sum, lost, e);
    }
    const float scale = 1.0f / sum;
    for (int k = 0; k < L; ++k) y[(size_t)k * inner] *= scale;
}

/* LayerNormalization over the last L values of each row: work-item o handles row o. Scale
 * and bias hold L values each (bias may be absent: has_bias = 0). */
__kernel void layer_norm(
    __global const float* restrict X, __global float* restrict Y,
    __global const float* restrict scale, __global const float* restrict bias,
    const int L, const float epsilon, const int has_bias)
{
    const int o = get_global_id(0);
    const __global float* x = X + (size_t)o * L;
    __global float* y = Y + (size_t)o * L;
    float mean = 0.0f, lost = 0.0f;
    for (int k = 0; k < L; ++k) KAHAN_ADD(mean, lost, x[k]);
    mean /= (float)L;
    float var = 0.0f;
    lost = 0.0f;
    for (int k = 0; k < L; ++k) {
        const float d = x[k] - mean;
        KAHAN_ADD(var, lost, d * d);
    }
    const float inv = 1.0f / sqrt(var / (float)L + epsilon);
    for (int k = 0; k < L; ++k) {
        const float v = (x[k] - mean) * inv * scale[k];
        y[k] = has_bias ? v + bias[k] : v;
    }
}

/* Reduce L values spaced `inner` apart (mode 0 sum, 1 mean, 2 max, 3 min): work-item (i, o)
 * reduces the run starting at o * L * inner + i into Y[o * inner + i]. */
__kernel void reduce_rows(
    __global const float* restrict X, __global float* restrict Y, const int L, const int inner,
    const int mode)
{
    const int i = get_global_id(0);
    const int o = get_global_id(1);
    const __global float* x = X + (size_t)o * L * inner + i;
    float acc = x[0], lost = 0.0f;
    if (mode < 2) {
        for (int k = 1; k < L; ++k) KAHAN_ADD(acc, lost, x[(size_t)k * inner]);
    } else {
        for (int k = 1; k < L; ++k) {
            const float v = x[(size_t)k * inner];
            acc = mode == 2 ? MAXF(acc, v) : MINF(acc, v);
        }
    }
    Y[(size_t)o * inner + i] = mode == 1 ? acc / (float)L : acc;
}
