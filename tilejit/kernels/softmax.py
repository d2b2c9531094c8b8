"""Row softmax of x [R, N], any R: 128 rows on the partitions per tile, the last cut short."""
import tilejit as tj


@tj.kernel
def softmax(x, out, R: tj.constexpr, N: tj.constexpr):
    with tj.thread():
        for r in range(tj.cdiv(R, 128)):   # tiles allocated per block: blocks are independent
            t = tj.alloc_shared((128, N), tj.float32)
            row_max = tj.alloc_shared((128, 1), tj.float32)
            row_sum = tj.alloc_shared((128, 1), tj.float32)
            tj.copy(t, x[r * 128:r * 128 + 128, 0:N])
            tj.reduce(row_max, t, "max", axis=1)
            tj.sub(t, t, row_max)
            tj.exp(t, t)
            tj.reduce(row_sum, t, "sum", axis=1)
            tj.div(t, t, row_sum)
            tj.copy(out[r * 128:r * 128 + 128, 0:N], t)
