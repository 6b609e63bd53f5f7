/* ConvTranspose over (OH, OW) outputs, gathering: output (n, m, oy, ox) sits at (oy + BH,
 * ox + BW) of the scattered canvas, which input (iy, ix) reaches through tap (ky, kx) when
 * iy * SH + ky * DH equals it. Weights are [C, M / group, KH, KW]. One-dimensional
 * transposes run with H = OH = KH = 1. Work-item (ox, oy, n * M + m). */
__kernel void conv_transpose2d(
    __global const float* restrict x, __global const float* restrict w,
    __global const float* restrict bias, __global float* restrict y,
    const int C, const int H, const int W, const int M, const int OH, const int OW,
    const int KH, const int KW, const int SH, const int SW, const int DH, const int DW,
    const int BH, const int BW, const int group)
{
    const int ox = get_global_id(0);
    const int oy = get_global_id(1);
    const int nm = get_global_id(2);
    if (ox >= OW || oy >= OH) return;
    const int m = nm % M;
    const int n = nm / M;
    const int mpg = M / group;
    const int cpg = C / group;
    const int g = m / mpg;
    const int ml = m % mpg;
    float acc = bias[m];
    for (int ky = 0; ky < KH; ++ky) {
        const int ty = oy + BH - ky * DH;
        if (ty < 0 || ty % SH) continue;
        const int iy = ty / SH;
        if (iy >= H) continue;
        for (int kx = 0; kx < KW; ++kx) {
            const int tx = ox + BW - kx * DW;
            if (tx < 0 || tx % SW) continue;
            const int ix = tx / SW;
            if (ix >= W) continue;
            for (int cl = 0; cl < cpg; ++cl) {
                const int c = g * cpg + cl;
                acc += x[((size_t)(n * C + c) * H + iy) * W + ix]
                     * w[(((size_t)c * mpg + ml) * KH + ky) * KW + kx];
            }
        }
    }
    y[((size_t)nm * OH + oy) * OW + ox] = acc;
}
