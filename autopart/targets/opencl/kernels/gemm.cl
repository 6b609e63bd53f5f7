/* Register-blocked matrix products with the weights packed on the host.
 *
 * Both kernels compute, for every batch item n and group g,
 *     Y[m, p] = epilogue(sum_k W[m, k] * X[k, p])
 * with the epilogue  v = acc + bias[m] (+ R[m, p] when has_res), then max(v, 0) when relu.
 * W is packed as [G][M_pad / TILE][K][TILE] so that one tile of output rows reads one
 * contiguous stream; padding rows are zero.
 *
 * gemm_pvec: each work-item owns PV_M rows x PV_N columns, vectors along the columns (p);
 *            for convolutions with many pixels. X and Y rows are contiguous in p.
 * gemm_mvec: each work-item owns MV_M (16 or 24) rows x MV_N columns, vectors along the rows
 *            (m); for few columns (late convolutions, fully connected layers). Any strides.
 */
#define PV_M 4
#define PV_N 16
#define MV_N 4

#define PV_STEP                                                                 \
    do {                                                                        \
        const float w0 = wk[0], w1 = wk[1], w2 = wk[2], w3 = wk[3];             \
        a00 += w0 * x0; a01 += w0 * x1;                                         \
        a10 += w1 * x0; a11 += w1 * x1;                                         \
        a20 += w2 * x0; a21 += w2 * x1;                                         \
        a30 += w3 * x0; a31 += w3 * x1;                                         \
        wk += PV_M; xk += x_row_stride;                                         \
    } while (0)

__kernel void gemm_pvec(
    const int M, const int K, const int P, const int G,
    __global const float* restrict W, const int w_group_stride,
    __global const float* restrict X, const int x_batch_stride, const int x_group_stride,
    const int x_row_stride,
    __global float* restrict Y, const int y_batch_stride, const int y_group_stride,
    __global const float* restrict bias,
    __global const float* restrict R, const int has_res, const int relu)
{
    const int p0 = get_global_id(0) * PV_N;
    const int mt = get_global_id(1);
    const int z = get_global_id(2);
    const int n = z / G, g = z - (z / G) * G;
    const int m0 = mt * PV_M;
    if (m0 >= M || p0 >= P) return;
    const __global float* wk = W + (size_t)g * w_group_stride + (size_t)mt * K * PV_M;
    const __global float* xk = X + (size_t)n * x_batch_stride + (size_t)g * x_group_stride + p0;
    const size_t ybase = (size_t)n * y_batch_stride + (size_t)g * y_group_stride;
    __global const float* b = bias + g * M;
    float8 a00 = 0.0f, a01 = 0.0f, a10 = 0.0f, a11 = 0.0f;
    float8 a20 = 0.0f, a21 = 0.0f, a30 = 0.0f, a31 = 0.0f;
    const int full = p0 + PV_N <= P;
    if (full) {
        for (int k = 0; k < K; ++k) {
            const float8 x0 = LOAD8(xk);
            const float8 x1 = LOAD8(xk + 8);
            PV_STEP;
        }
    } else {
        const int last = P - p0 - 1; /* columns past the end repeat the last one */
#define C(j) xk[MINI(j, last)]
        for (int k = 0; k < K; ++k) {
            const float8 x0 = (float8)(C(0), C(1), C(2), C(3), C(4), C(5), C(6), C(7));
            const float8 x1 = (float8)(C(8), C(9), C(10), C(11), C(12), C(13), C(14), C(15));
            PV_STEP;
        }
#undef C
    }
    float8 acc[PV_M][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
    for (int i = 0; i < PV_M; ++i) {
        const int m = m0 + i;
        if (m >= M) break;
        const float bm = b[m];
        const size_t row = ybase + (size_t)m * P + p0;
        for (int h = 0; h < 2; ++h) {
            float8 v = acc[i][h] + bm;
            if (full) {
                if (has_res) v += LOAD8(R + row + 8 * h);
                if (relu) v = RELU8(v);
                STORE8(v, Y + row + 8 * h);
            } else {
                float8_parts vs;
                vs.v = v;
                for (int j = 0; j < 8; ++j) {
                    const int p = 8 * h + j;
                    if (p0 + p < P) {
                        float s = vs.s[j];
                        if (has_res) s += R[row + p];
                        if (relu) s = RELU(s);
                        Y[row + p] = s;
                    }
                }
            }
        }
    }
}

/* gemm_pvec over an implicit im2col for stride-1 convolutions ("shifted" GEMM). The input is
 * first copied into a zero-padded buffer of planes Hp x Wp; output pixels are computed on the
 * padded width (p' = oh * Wp + ow', PP = OH * Wp of them), so that the reduction index
 * k = (c, kh, kw) reads the contiguous run starting at c * plane + kh * DH * Wp + kw * DW + p'.
 * Columns with ow' >= OW are computed but never stored; the padded buffer carries enough slack
 * after its last plane that no load goes out of bounds. */
__kernel void gemm_pvec_shift(
    const int M, const int Cg, const int KH, const int KW, const int DH, const int DW,
    const int Wp, const int plane, const int OW, const int PP, const int P, const int G,
    __global const float* restrict W, const int w_group_stride,
    __global const float* restrict X, const int x_batch_stride, const int x_group_stride,
    __global float* restrict Y, const int y_batch_stride, const int y_group_stride,
    __global const float* restrict bias,
    __global const float* restrict R, const int has_res, const int relu)
{
    const int p0 = get_global_id(0) * PV_N;
    const int mt = get_global_id(1);
    const int z = get_global_id(2);
    const int n = z / G, g = z - (z / G) * G;
    const int m0 = mt * PV_M;
    if (m0 >= M || p0 >= PP) return;
    const __global float* wk = W + (size_t)g * w_group_stride + (size_t)mt * Cg * KH * KW * PV_M;
    const __global float* xc = X + (size_t)n * x_batch_stride + (size_t)g * x_group_stride + p0;
    const size_t ybase = (size_t)n * y_batch_stride + (size_t)g * y_group_stride;
    __global const float* b = bias + g * M;
    float8 a00 = 0.0f, a01 = 0.0f, a10 = 0.0f, a11 = 0.0f;
    float8 a20 = 0.0f, a21 = 0.0f, a30 = 0.0f, a31 = 0.0f;
    for (int c = 0; c < Cg; ++c) {
        for (int kh = 0; kh < KH; ++kh) {
            const __global float* xr = xc + kh * DH * Wp;
            for (int kw = 0; kw < KW; ++kw) {
                const float8 x0 = LOAD8(xr);
                const float8 x1 = LOAD8(xr + 8);
                const float w0 = wk[0], w1 = wk[1], w2 = wk[2], w3 = wk[3];
                a00 += w0 * x0; a01 += w0 * x1;
                a10 += w1 * x0; a11 += w1 * x1;
                a20 += w2 * x0; a21 += w2 * x1;
                a30 += w3 * x0; a31 += w3 * x1;
                wk += PV_M; xr += DW;
            }
        }
        xc += plane;
    }
    const int oh0 = p0 / Wp, ow0 = p0 - (p0 / Wp) * Wp;
    const int full = ow0 + PV_N <= OW;
    float8 acc[PV_M][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
    for (int i = 0; i < PV_M; ++i) {
        const int m = m0 + i;
        if (m >= M) break;
        const float bm = b[m];
        const size_t plane_out = ybase + (size_t)m * P;
        for (int h = 0; h < 2; ++h) {
            float8 v = acc[i][h] + bm;
            if (full) {
                const size_t at = plane_out + (size_t)oh0 * OW + ow0 + 8 * h;
                if (has_res) v += LOAD8(R + at);
                if (relu) v = RELU8(v);
                STORE8(v, Y + at);
            } else {
                float8_parts vs;
                vs.v = v;
                for (int j = 0; j < 8; ++j) {
                    const int p = p0 + 8 * h + j;
                    const int oh = p / Wp, ow = p - (p / Wp) * Wp;
                    if (p < PP && ow < OW) {
                        const size_t at = plane_out + (size_t)oh * OW + ow;
                        float s = vs.s[j];
                        if (has_res) s += R[at];
                        if (relu) s = RELU(s);
                        Y[at] = s;
                    }
                }
            }
        }
    }
}

/* MV_VECS (2 or 3, set when the program is built) float8 vectors of rows per work-item. */
#ifndef MV_VECS
#define MV_VECS 2
#endif
#if MV_VECS == 3
#define MV3(x) x
#else
#define MV3(x)
#endif
#define MV_M (8 * MV_VECS)

__kernel void gemm_mvec(
    const int M, const int K, const int P, const int G,
    __global const float* restrict W, const int w_group_stride,
    __global const float* restrict X, const int x_batch_stride, const int x_group_stride,
    const int x_k_stride, const int x_p_stride,
    __global float* restrict Y, const int y_batch_stride, const int y_group_stride,
    const int y_m_stride, const int y_p_stride,
    __global const float* restrict bias,
    __global const float* restrict R, const int has_res, const int relu)
{
    const int p0 = get_global_id(0) * MV_N;
    const int mt = get_global_id(1);
    const int z = get_global_id(2);
    const int n = z / G, g = z - (z / G) * G;
    const int m0 = mt * MV_M;
    if (m0 >= M || p0 >= P) return;
    const __global float* wk = W + (size_t)g * w_group_stride + (size_t)mt * K * MV_M;
    const __global float* xk = X + (size_t)n * x_batch_stride + (size_t)g * x_group_stride;
    const size_t ybase = (size_t)n * y_batch_stride + (size_t)g * y_group_stride;
    __global const float* b = bias + g * M;
    /* columns past the end repeat the last one; their results are never stored */
    const int c0 = p0 * x_p_stride;
    const int c1 = MINI(p0 + 1, P - 1) * x_p_stride;
    const int c2 = MINI(p0 + 2, P - 1) * x_p_stride;
    const int c3 = MINI(p0 + 3, P - 1) * x_p_stride;
    float8 a00 = 0.0f, a01 = 0.0f, a10 = 0.0f, a11 = 0.0f;
    float8 a20 = 0.0f, a21 = 0.0f, a30 = 0.0f, a31 = 0.0f;
    MV3(float8 a02 = 0.0f; float8 a12 = 0.0f; float8 a22 = 0.0f; float8 a32 = 0.0f;)
    for (int k = 0; k < K; ++k) {
        const float8 w0 = LOAD8(wk);
        const float8 w1 = LOAD8(wk + 8);
        MV3(const float8 w2 = LOAD8(wk + 16);)
        const float x0 = xk[c0], x1 = xk[c1], x2 = xk[c2], x3 = xk[c3];
        a00 += x0 * w0; a01 += x0 * w1; MV3(a02 += x0 * w2;)
        a10 += x1 * w0; a11 += x1 * w1; MV3(a12 += x1 * w2;)
        a20 += x2 * w0; a21 += x2 * w1; MV3(a22 += x2 * w2;)
        a30 += x3 * w0; a31 += x3 * w1; MV3(a32 += x3 * w2;)
        wk += MV_M; xk += x_k_stride;
    }
#if MV_VECS == 3
    float8 acc[MV_N][3] = {{a00, a01, a02}, {a10, a11, a12}, {a20, a21, a22}, {a30, a31, a32}};
#else
    float8 acc[MV_N][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
#endif
    for (int j = 0; j < MV_N; ++j) {
        const int p = p0 + j;
        if (p >= P) break;
        for (int h = 0; h < MV_VECS; ++h) {
            float8_parts vs;
            vs.v = acc[j][h];
            for (int i = 0; i < 8; ++i) {
                const int m = m0 + 8 * h + i;
                if (m < M) {
                    const size_t off = ybase + (size_t)m * y_m_stride + (size_t)p * y_p_stride;
                    float s = vs.s[i] + b[m];
                    if (has_res) s += R[off];
                    if (relu) s = RELU(s);
                    Y[off] = s;
                }
            }
        }
    }
}

/* Y[b, m, n] = alpha * sum_k A[b, m, k] B[b, k, n] (+ beta * C[b, m, n]) for operands that are
 * not constants (attention scores, Gemm with two activations). Any strides; the batch index
 * is decoded over up to three broadcast batch dims (b = (b0 * B1 + b1) * B2 + b2). Each
 * work-item owns a 4 x 8 register tile (vector loads of B rows when b_n == 1); rows and
 * columns past the edges repeat the last one and are not stored. */
__kernel void matmul_general(
    const int M, const int N, const int K,
    __global const float* restrict A, const int a_m, const int a_k,
    const int a_b0, const int a_b1, const int a_b2,
    __global const float* restrict B, const int b_k, const int b_n,
    const int b_b0, const int b_b1, const int b_b2,
    __global float* restrict Y, const int B1, const int B2, const float alpha,
    __global const float* restrict C, const int c_m, const int c_n,
    const int c_b0, const int c_b1, const int c_b2, const float beta, const int has_c)
{
    const int n0 = get_global_id(0) * 8;
    const int m0 = get_global_id(1) * 4;
    const int b = get_global_id(2);
    if (n0 >= N || m0 >= M) return;
    const int b2 = b % B2, b1 = (b / B2) % B1, b0 = b / (B1 * B2);
    const __global float* a = A + (size_t)b0 * a_b0 + (size_t)b1 * a_b1 + (size_t)b2 * a_b2;
    const __global float* x = B + (size_t)b0 * b_b0 + (size_t)b1 * b_b1 + (size_t)b2 * b_b2;
    const size_t r0 = (size_t)m0 * a_m, r1 = (size_t)MINI(m0 + 1, M - 1) * a_m;
    const size_t r2 = (size_t)MINI(m0 + 2, M - 1) * a_m, r3 = (size_t)MINI(m0 + 3, M - 1) * a_m;
    const int vector = b_n == 1 && n0 + 8 <= N;
    int cols[8];
    for (int j = 0; j < 8; ++j) cols[j] = MINI(n0 + j, N - 1) * b_n;
    float8 acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
    for (int k = 0; k < K; ++k) {
        const __global float* row = x + (size_t)k * b_k;
        float8 v;
        if (vector) {
            v = LOAD8(row + n0);
        } else {
            v = (float8)(row[cols[0]], row[cols[1]], row[cols[2]], row[cols[3]],
                         row[cols[4]], row[cols[5]], row[cols[6]], row[cols[7]]);
        }
        const size_t ak = (size_t)k * a_k;
        acc0 += a[r0 + ak] * v;
        acc1 += a[r1 + ak] * v;
        acc2 += a[r2 + ak] * v;
        acc3 += a[r3 + ak] * v;
    }
    float8 acc[4] = {acc0, acc1, acc2, acc3};
    const size_t cbase = (size_t)b0 * c_b0 + (size_t)b1 * c_b1 + (size_t)b2 * c_b2;
    for (int i = 0; i < 4; ++i) {
        const int m = m0 + i;
        if (m >= M) break;
        float8_parts parts;
        parts.v = acc[i] * alpha;
        for (int j = 0; j < 8; ++j) {
            const int n = n0 + j;
            if (n >= N) break;
            float value = parts.s[j];
            if (has_c) value += beta * C[cbase + (size_t)m * c_m + (size_t)n * c_n];
            Y[((size_t)b * M + m) * N + n] = value;
        }
    }
}
