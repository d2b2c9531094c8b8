"""The TIRx paper's GEMM (§5.3) on Trainium: C [512, 256] = A [512, 1024] @ B [1024, 256]
with K on the partitions of A and B and N on C's, so dispatch swaps the operand roles (B
stationary) and loops M 4, N 2, K 8 around one 128 x 128 x 128 nc_matmul."""
import tilejit as tj
from tilejit.layout import TileLayout

L_A = TileLayout.parse("(4,128,8,128):(1024@F,1@F,128@F,1@P)")
L_B = TileLayout.parse("(8,128,2,128):(256@F,1@P,128@F,1@F)")
L_C = TileLayout.parse("(4,128,2,128):(256@F,1@F,128@F,1@P)")


@tj.kernel
def nki_gemm(a, b, c, DT: tj.constexpr = tj.float32):
    with tj.thread():                       # NKI: one instruction stream
        A = tj.alloc_shared((512, 1024), DT, layout=L_A)          # SBUF tiles
        B = tj.alloc_shared((1024, 256), DT, layout=L_B)
        C = tj.alloc_shared((512, 256), tj.float32, layout=L_C)
        tj.copy(A, a[0:512, 0:1024])
        tj.copy(B, b[0:1024, 0:256])
        tj.gemm(C, A, B, accum=False)
        tj.copy(c[0:512, 0:256], C)
