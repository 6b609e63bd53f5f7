/* Convolution helpers: im2col feeding the GEMM kernels, and a direct kernel for
 * convolutions with one input channel per group (depthwise). NCHW layout; one spatial
 * dimension is handled as two with H = 1. */

/* col[z][(c * KH + kh) * KW + kw][oh * OW + ow] = X[n][g * Cg + c][ih][iw] (0 outside), with
 * z = n * G + g. Work-item (oh, z * rows + row) fills one output row of one column row. */
__kernel void im2col(
    __global const float* restrict X, __global float* restrict col,
    const int Cg, const int G, const int H, const int W, const int OH, const int OW,
    const int KH, const int KW, const int SH, const int SW, const int PH, const int PW,
    const int DH, const int DW)
{
    const int oh = get_global_id(0);
    const int rows = Cg * KH * KW;
    const int zr = get_global_id(1);
    const int z = zr / rows, row = zr - (zr / rows) * rows;
    const int c = row / (KH * KW), kk = row - (row / (KH * KW)) * (KH * KW);
    const int kh = kk / KW, kw = kk - (kk / KW) * KW;
    const int n = z / G, g = z - (z / G) * G;
    const int ih = oh * SH - PH + kh * DH;
    __global float* out = col + (size_t)zr * OH * OW + (size_t)oh * OW;
    if (ih < 0 || ih >= H) {
        for (int ow = 0; ow < OW; ++ow) out[ow] = 0.0f;
        return;
    }
    const __global float* x = X + (((size_t)n * G + g) * Cg + c) * H * W + (size_t)ih * W;
    const int shift = kw * DW - PW;
    if (SW == 1) {
        /* columns [lo, hi) read x[ow + shift]; the rest are padding */
        const int lo = MINI(OW, MAXI(0, -shift)), hi = MAXI(lo, MINI(OW, W - shift));
        for (int ow = 0; ow < lo; ++ow) out[ow] = 0.0f;
        for (int ow = lo; ow < hi; ++ow) out[ow] = x[ow + shift];
        for (int ow = hi; ow < OW; ++ow) out[ow] = 0.0f;
        return;
    }
    for (int ow = 0; ow < OW; ++ow) {
        const int iw = ow * SW + shift;
        out[ow] = (iw >= 0 && iw < W) ? x[iw] : 0.0f;
    }
}

/* Xp[z][hp][wp] = X[z][hp - PH][wp - PW], zero outside: the padded planes (Hp x Wp) read by
 * gemm_pvec_shift. Work-item (hp, z) writes one padded row. */
__kernel void pad_planes(
    __global const float* restrict X, __global float* restrict Xp, const int H, const int W,
    const int Hp, const int Wp, const int PH, const int PW)
{
    const int hp = get_global_id(0);
    const int z = get_global_id(1);
    __global float* out = Xp + ((size_t)z * Hp + hp) * Wp;
    const int h = hp - PH;
    if (h < 0 || h >= H) {
        for (int w = 0; w < Wp; ++w) out[w] = 0.0f;
        return;
    }
    const __global float* x = X + ((size_t)z * H + h) * W;
    const int hi = MINI(Wp, PW + W);
    for (int w = 0; w < PW; ++w) out[w] = 0.0f;
    for (int w = PW; w < hi; ++w) out[w] = x[w - PW];
    for (int w = hi; w < Wp; ++w) out[w] = 0.0f;
}

/* One input channel per group: output channel m reads input channel m / (M / C). Work-item
 * (oh, n * M + m) computes one output row; weights [M][KH][KW]; the GEMM epilogue. */
__kernel void conv_depthwise(
    __global const float* restrict X, __global const float* restrict Wt,
    __global float* restrict Y, const int C, const int M, const int H, const int W,
    const int OH, const int OW, const int KH, const int KW, const int SH, const int SW,
    const int PH, const int PW, const int DH, const int DW,
    __global const float* restrict bias,
    __global const float* restrict R, const int has_res, const int relu)
{
    const int oh = get_global_id(0);
    const int z = get_global_id(1);
    const int n = z / M, m = z - (z / M) * M;
    const int c = m / (M / C);
    const __global float* x = X + ((size_t)n * C + c) * H * W;
    const __global float* w = Wt + (size_t)m * KH * KW;
    const size_t row = (size_t)z * OH * OW + (size_t)oh * OW;
    const int h0 = oh * SH - PH;
    const int kh_lo = tap_lo(h0, 0, DH), kh_hi = tap_hi(h0, H, KH, DH);
    const float b = bias[m];
    for (int ow = 0; ow < OW; ++ow) {
        const int w0 = ow * SW - PW;
        const int kw_lo = tap_lo(w0, 0, DW), kw_hi = tap_hi(w0, W, KW, DW);
        float acc = 0.0f;
        for (int kh = kh_lo; kh < kh_hi; ++kh) {
            const __global float* xr = x + (h0 + kh * DH) * W + w0;
            const __global float* wr = w + kh * KW;
            for (int kw = kw_lo; kw < kw_hi; ++kw) acc += xr[kw * DW] * wr[kw];
        }
        float v = acc + b;
        if (has_res) v += R[row + ow];
        if (relu) v = RELU(v);
        Y[row + ow] = v;
    }
}
