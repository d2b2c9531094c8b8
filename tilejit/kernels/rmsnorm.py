"""RMSNorm of x [R, N], any R (the last tile of rows cut short): x * rsqrt(mean(x^2) + eps)
* w, with ``w`` given as the weight row on each of the 128 partitions ([128, N]: an engine
reads its operands partition by partition, so the row is replicated, not broadcast)."""
import tilejit as tj


@tj.kernel
def rmsnorm(x, w, out, R: tj.constexpr, N: tj.constexpr, eps: tj.constexpr = 1e-6):
    with tj.thread():
        weight = tj.alloc_shared((128, N), tj.float32)
        tj.copy(weight, w[0:128, 0:N])
        for r in range(tj.cdiv(R, 128)):   # tiles allocated per block: blocks are independent
            t = tj.alloc_shared((128, N), tj.float32)
            sq = tj.alloc_shared((128, N), tj.float32)
            ms = tj.alloc_shared((128, 1), tj.float32)
            tj.copy(t, x[r * 128:r * 128 + 128, 0:N])
            tj.mul(sq, t, t)
            tj.reduce(ms, sq, "sum", axis=1)
            tj.mul(ms, ms, 1.0 / N)
            tj.add(ms, ms, eps)
            tj.rsqrt(ms, ms)
            tj.mul(t, t, ms)
            tj.mul(t, t, weight)
            tj.copy(out[r * 128:r * 128 + 128, 0:N], t)
