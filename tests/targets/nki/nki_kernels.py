"""Hand-written NKI modules in the contract of nki_reference.py, for testing the reference
and the lint (and, where ``nki`` is importable, the NKI simulator) against numpy.

Every module tiles ragged shapes: rows over 128 partitions, GEMM's N over 512 and K over
128, with the last tile partial.
"""
import textwrap

HEADER = "import nki\nimport nki.language as nl\nimport nki.isa as nisa\n\n\n"
BODY_LINE = 8      # the first body line of module(): after HEADER, @nki.jit and def


def module(body: str, params: str = "x", name: str = "k") -> str:
    """A one-kernel module around ``body`` (kernel ``name(params)``); its first line is
    module line BODY_LINE."""
    body = textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
    return f"{HEADER}@nki.jit\ndef {name}({params}):\n{body}\n"


# out[M, N] = a_t[K, M].T @ b[K, N]; K accumulates in one PSUM tile per output tile.
GEMM = HEADER + '''\
@nki.jit
def gemm(a_t, b):
    K, M = a_t.shape
    _, N = b.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range((M + 127) // 128):
        ms = min(128, M - m * 128)
        for n in nl.affine_range((N + 511) // 512):
            ns = min(512, N - n * 512)
            acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range((K + 127) // 128):
                ks = min(128, K - k * 128)
                a_tile = nl.ndarray((128, 128), dtype=IN_DTYPE, buffer=nl.sbuf)
                b_tile = nl.ndarray((128, 512), dtype=IN_DTYPE, buffer=nl.sbuf)
                nisa.dma_copy(dst=a_tile[0:ks, 0:ms],
                              src=a_t[k * 128:k * 128 + ks, m * 128:m * 128 + ms])
                nisa.dma_copy(dst=b_tile[0:ks, 0:ns],
                              src=b[k * 128:k * 128 + ks, n * 512:n * 512 + ns])
                nisa.nc_matmul(dst=acc[0:ms, 0:ns], stationary=a_tile[0:ks, 0:ms],
                               moving=b_tile[0:ks, 0:ns]ACCUMULATE)
            res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res[0:ms, 0:ns], src=acc[0:ms, 0:ns])
            nisa.dma_copy(dst=out[m * 128:m * 128 + ms, n * 512:n * 512 + ns],
                          src=res[0:ms, 0:ns])
    return out
'''


def gemm(in_dtype: str = "float32", accumulate: str = "", k_loop: str = "affine_range"):
    """GEMM with its input dtype, an explicit ``accumulate=`` (e.g. "k != 0") and the
    K loop's iterator chosen by the test."""
    src = GEMM.replace("IN_DTYPE", f"nl.{in_dtype}")
    src = src.replace("ACCUMULATE", f", accumulate=({accumulate})" if accumulate else "")
    return src.replace("for k in nl.affine_range", f"for k in nl.{k_loop}")


# Row softmax: max, exp(x - max) with its row sum from the Scalar Engine's reduce
# registers, times the reciprocal of the sum.
SOFTMAX = HEADER + '''\
@nki.jit
def softmax(x):
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=nl.float32, buffer=nl.shared_hbm)
    for r in nl.affine_range((R + 127) // 128):
        p = min(128, R - r * 128)
        t = nl.ndarray((128, C), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:p, 0:C], src=x[r * 128:r * 128 + p, 0:C])
        row_max = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=row_max[0:p, 0:1], op=nl.maximum, data=t[0:p, 0:C], axis=1,
                           keepdims=True)
        neg_max = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=neg_max[0:p], data=row_max[0:p], op0=nl.multiply,
                           operand0=-1.0)
        e = nl.ndarray((128, C), dtype=nl.float32, buffer=nl.sbuf)
        row_sum = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e[0:p], op=nl.exp, data=t[0:p], bias=neg_max[0:p],
                        reduce_op=nl.add, reduce_res=row_sum[0:p],
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        inv = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=inv[0:p], op=nl.reciprocal, data=row_sum[0:p])
        y = nl.ndarray((128, C), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y[0:p], data=e[0:p], op0=nl.multiply, operand0=inv[0:p])
        nisa.dma_copy(dst=out[r * 128:r * 128 + p, 0:C], src=y[0:p])
    return out
'''

# RMSNorm: x * rsqrt(mean(x^2) + eps) * w, the weight row replicated on every partition.
RMSNORM = HEADER + '''\
@nki.jit
def rmsnorm(x, w):
    R, D = x.shape
    out = nl.ndarray((R, D), dtype=nl.float32, buffer=nl.shared_hbm)
    w_rows = nl.ndarray((128, D), dtype=nl.float32, buffer=nl.sbuf)
    for q in nl.affine_range(128):
        nisa.dma_copy(dst=w_rows[q:q + 1, 0:D], src=w[0:D])
    for r in nl.affine_range((R + 127) // 128):
        p = min(128, R - r * 128)
        t = nl.ndarray((128, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:p], src=x[r * 128:r * 128 + p, 0:D])
        sq = nl.ndarray((128, D), dtype=nl.float32, buffer=nl.sbuf)
        ss = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq[0:p], op=nl.square, data=t[0:p], reduce_op=nl.add,
                        reduce_res=ss[0:p], reduce_cmd=nisa.reduce_cmd.reset_reduce)
        rstd = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd[0:p], data=ss[0:p], op0=nl.multiply, operand0=1.0 / D,
                           op1=nl.add, operand1=1e-6)
        nisa.activation(dst=rstd[0:p], op=nl.rsqrt, data=rstd[0:p])
        y = nl.ndarray((128, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y[0:p], data=t[0:p], op0=nl.multiply, operand0=rstd[0:p])
        nisa.tensor_tensor(dst=y[0:p], data1=y[0:p], data2=w_rows[0:p], op=nl.multiply)
        nisa.dma_copy(dst=out[r * 128:r * 128 + p, 0:D], src=y[0:p])
    return out
'''

# Causal mask of a transposed square block: out = tril(x.T) with -1e4 above the diagonal
# (nc_transpose through PSUM, then affine_select on partition - column >= 0).
CAUSAL_T = HEADER + '''\
@nki.jit
def causal_t(x):
    S, _ = x.shape
    out = nl.ndarray((S, S), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((S, S), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    t_ps = nl.ndarray((S, S), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_transpose(dst=t_ps, data=t)
    t_sb = nl.ndarray((S, S), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t_sb, src=t_ps)
    masked = nl.ndarray((S, S), dtype=nl.float32, buffer=nl.sbuf)
    nisa.affine_select(dst=masked, pattern=[[-1, S]], channel_multiplier=1,
                       on_true_tile=t_sb, on_false_value=-1e4, cmp_op=nl.greater_equal)
    nisa.dma_copy(dst=out, src=masked)
    return out
'''

# out[:, block b] = x[:, blocks 0..b] summed: a loop-carried dependence on `acc`, so it is
# only right under an in-order loop.
PREFIX_BLOCKS = HEADER + '''\
@nki.jit
def prefix_blocks(x):
    P, C = x.shape
    out = nl.ndarray((P, C), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((P, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for b in nl.LOOP(C // 64):
        t = nl.ndarray((P, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[0:P, b * 64:(b + 1) * 64])
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        nisa.dma_copy(dst=out[0:P, b * 64:(b + 1) * 64], src=acc)
    return out
'''


def prefix_blocks(loop: str) -> str:
    return PREFIX_BLOCKS.replace("nl.LOOP", f"nl.{loop}")

# Causal attention forward, one 128-query block per head: S = q k^T / sqrt(d) on the
# Tensor Engine (q, k transposed through PSUM so d is the contraction on partitions), the
# causal mask by affine_select, the row softmax, then (P^T)^T v normalized by the row sums.
ATTENTION = HEADER + '''\
@nki.jit
def attention(q, k, v):
    H, S, D = q.shape
    out = nl.ndarray((H, S, D), dtype=nl.float32, buffer=nl.shared_hbm)
    for h in nl.affine_range(H):
        q_sb = nl.ndarray((S, D), dtype=nl.float32, buffer=nl.sbuf)
        k_sb = nl.ndarray((S, D), dtype=nl.float32, buffer=nl.sbuf)
        v_sb = nl.ndarray((S, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=q_sb, src=q[h, 0:S, 0:D])
        nisa.dma_copy(dst=k_sb, src=k[h, 0:S, 0:D])
        nisa.dma_copy(dst=v_sb, src=v[h, 0:S, 0:D])
        qt_ps = nl.ndarray((D, S), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=qt_ps, data=q_sb)
        qt = nl.ndarray((D, S), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=qt, src=qt_ps)
        kt_ps = nl.ndarray((D, S), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=kt_ps, data=k_sb)
        kt = nl.ndarray((D, S), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=kt, src=kt_ps)
        s_ps = nl.ndarray((S, S), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=s_ps, stationary=qt, moving=kt)
        s = nl.ndarray((S, S), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=s, op=nl.copy, data=s_ps, scale=1.0 / D ** 0.5)
        masked = nl.ndarray((S, S), dtype=nl.float32, buffer=nl.sbuf)
        nisa.affine_select(dst=masked, pattern=[[-1, S]], channel_multiplier=1,
                           on_true_tile=s, on_false_value=-30000.0,
                           cmp_op=nl.greater_equal)
        row_max = nl.ndarray((S, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=row_max, op=nl.maximum, data=masked, axis=1, keepdims=True)
        nisa.tensor_scalar(dst=row_max, data=row_max, op0=nl.multiply, operand0=-1.0)
        p = nl.ndarray((S, S), dtype=nl.float32, buffer=nl.sbuf)
        row_sum = nl.ndarray((S, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=p, op=nl.exp, data=masked, bias=row_max, reduce_op=nl.add,
                        reduce_res=row_sum, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        pt_ps = nl.ndarray((S, S), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=pt_ps, data=p)
        pt = nl.ndarray((S, S), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=pt, src=pt_ps)
        o_ps = nl.ndarray((S, D), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=o_ps, stationary=pt, moving=v_sb)
        inv = nl.ndarray((S, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=inv, op=nl.reciprocal, data=row_sum)
        o = nl.ndarray((S, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o, data=o_ps, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out[h, 0:S, 0:D], src=o)
    return out
'''
