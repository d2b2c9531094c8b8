"""Attention forward, out = softmax(q k^T * scale) v per head, for q, k, v [H, S, D] with
any S (the last blocks of 128 cut short, their keys past S masked) and D <= 128. Each
128-query block walks the keys in blocks of 128 with an online softmax (a running row max
``m`` and row sum ``l``; the output so far is rescaled by exp(m_old - m_new) whenever the
max grows), so the scores of one block are all that is ever on chip. The probabilities
are turned onto the key partitions by a copy between layouts (nc_transpose) for the
second matmul. ``causal``: a key after its query is masked by ``affine_select`` (key
blocks wholly after the query block are computed and masked too: NKI loop bounds are
compile-time, so the key loop cannot stop at the diagonal)."""
import tilejit as tj
from tilejit.layout.hw_trainium import sbuf_layout

KEYS_ON_P = sbuf_layout((128, 128), partition_dim=1)       # [queries, keys]: keys on them


@tj.kernel
def attention(q, k, v, out, H: tj.constexpr, S: tj.constexpr, D: tj.constexpr,
              scale: tj.constexpr, causal: tj.constexpr = False):
    with tj.thread():
        for h in range(H):
            for i in range(tj.cdiv(S, 128)):   # query blocks apart; the key loop carries m, l, o
                Q = tj.alloc_shared((128, D), tj.float32, layout=sbuf_layout((128, D), 1))
                o = tj.alloc_shared((128, D), tj.float32)
                m = tj.alloc_shared((128, 1), tj.float32)        # running row max
                l = tj.alloc_shared((128, 1), tj.float32)        # running row sum
                tj.copy(Q, q[h, i * 128:i * 128 + 128, 0:D])
                tj.fill(m, -30000.0)
                tj.fill(l, 0.0)
                tj.fill(o, 0.0)
                for j in range(tj.cdiv(S, 128)):
                    K = tj.alloc_shared((128, D), tj.float32, layout=sbuf_layout((128, D), 1))
                    V = tj.alloc_shared((128, D), tj.float32)
                    s = tj.alloc_shared((128, 128), tj.float32)
                    p_t = tj.alloc_shared((128, 128), tj.float32, layout=KEYS_ON_P)
                    m_new = tj.alloc_shared((128, 1), tj.float32)
                    rescale = tj.alloc_shared((128, 1), tj.float32)
                    block_sum = tj.alloc_shared((128, 1), tj.float32)
                    tj.copy(K, k[h, j * 128:j * 128 + 128, 0:D])
                    tj.copy(V, v[h, j * 128:j * 128 + 128, 0:D])
                    tj.gemm(s, Q, K, transpose_b=True, accum=False)
                    tj.mul(s, s, scale)
                    if causal:   # query i * 128 + r sees key j * 128 + c up to itself
                        rows = tj.arange(0, 128) + i * 128
                        cols = tj.arange(0, 128) + j * 128
                        tj.where(s, rows[:, None] >= cols[None, :], s, -30000.0)
                    elif S % 128:   # the last key block's keys past S (zeros) see nothing
                        cols = tj.arange(0, 128) + j * 128
                        tj.where(s, cols[None, :] < S, s, -30000.0)
                    tj.reduce(m_new, s, "max", axis=1)
                    tj.maximum(m_new, m_new, m)
                    tj.sub(rescale, m, m_new)
                    tj.exp(rescale, rescale)
                    tj.copy(m, m_new)
                    tj.sub(s, s, m_new)
                    tj.exp(s, s)
                    tj.reduce(block_sum, s, "sum", axis=1)
                    tj.mul(l, l, rescale)
                    tj.add(l, l, block_sum)
                    tj.mul(o, o, rescale)
                    tj.copy(p_t, s)
                    tj.gemm(o, p_t, V, accum=True)
                tj.div(o, o, l)
                tj.copy(out[h, i * 128:i * 128 + 128, 0:D], o)
