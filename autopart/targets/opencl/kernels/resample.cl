/* Separable resampling of the last two dims (Resize): for plane o and output (y, x),
 * dst = sum_i wy[y, i] * sum_j wx[x, j] * src[o, iy[y, i], ix[x, j]], with ty and tx taps
 * per output row and column (indices already clamped to the input). Work-item (x, y, o). */
__kernel void resample2d(
    __global const float* restrict src, __global float* restrict dst,
    __global const int* restrict iy, __global const float* restrict wy,
    __global const int* restrict ix, __global const float* restrict wx,
    const int in_h, const int in_w, const int out_h, const int out_w, const int ty, const int tx)
{
    const int x = get_global_id(0);
    const int y = get_global_id(1);
    const int o = get_global_id(2);
    if (x >= out_w || y >= out_h) return;
    const __global float* plane = src + (size_t)o * in_h * in_w;
    float acc = 0.0f;
    for (int i = 0; i < ty; ++i) {
        const float w = wy[y * ty + i];
        if (w == 0.0f) continue;
        const __global float* row = plane + (size_t)iy[y * ty + i] * in_w;
        float part = 0.0f;
        for (int j = 0; j < tx; ++j) part += wx[x * tx + j] * row[ix[x * tx + j]];
        acc += w * part;
    }
    dst[((size_t)o * out_h + y) * out_w + x] = acc;
}
