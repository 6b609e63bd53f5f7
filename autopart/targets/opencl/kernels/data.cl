/* Data movement. */

/* dst[dst_offset + row * dst_row_stride + j] = src[row * chunk + j]: one input of a Concat.
 * Work-item (j, row). */
__kernel void copy_rows(
    __global const float* restrict src, __global float* restrict dst, const int chunk,
    const int dst_row_stride, const int dst_offset)
{
    const int j = get_global_id(0);
    const int row = get_global_id(1);
    if (j >= chunk) return;
    dst[(size_t)dst_offset + (size_t)row * dst_row_stride + j] = src[(size_t)row * chunk + j];
}

/* dst[row * chunk + j] = src[src_offset + row * src_row_stride + j]: one output of a Split.
 * Work-item (j, row). */
__kernel void slice_rows(
    __global const float* restrict src, __global float* restrict dst, const int chunk,
    const int src_row_stride, const int src_offset)
{
    const int j = get_global_id(0);
    const int row = get_global_id(1);
    if (j >= chunk) return;
    dst[(size_t)row * chunk + j] = src[(size_t)src_offset + (size_t)row * src_row_stride + j];
}
