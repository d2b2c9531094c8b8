"""Atomics and warp shuffles (docs/language.md "Atomics and warp shuffles"): element atomics
``tj.atomic_*(buf[i], v)`` returning the old value, tile atomics
``tj.atomic_add(out[r:r + BM, c:c + BN], tile)``, compare-and-swap and ``tj.shuffle``, in
kernels whose native code is uniform (one CPU unit per CTA) and per-thread."""
import inspect

import pytest
import torch

import tilejit as tj

NUM_WARPS = 2
THREADS = 32 * NUM_WARPS


# ----------------------------------------------------------------------------- split-K
@tj.kernel
def split_k_gemm(a, b, c, M, N, K, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr,
                 SPLIT: tj.constexpr):
    pm, pn, part = tj.cta_id(0), tj.cta_id(1), tj.cta_id(2)
    acc = tj.fragment((BM, BN), tj.float32)
    tj.fill(acc, 0.0)
    ta = tj.fragment((BM, BK), tj.float32)
    tb = tj.fragment((BK, BN), tj.float32)
    for k in range(part * BK, K, SPLIT * BK):      # this CTA's share of K
        tj.copy(ta, a[pm * BM:pm * BM + BM, k:k + BK])
        tj.copy(tb, b[k:k + BK, pn * BN:pn * BN + BN])
        tj.gemm(acc, ta, tb)
    tj.atomic_add(c[pm * BM:pm * BM + BM, pn * BN:pn * BN + BN], acc)


@pytest.mark.parametrize("M,N,K,split", [(64, 48, 256, 4), (70, 50, 300, 3), (16, 16, 16, 5)])
def test_split_k_gemm_adds_partial_products_with_tile_atomics(M, N, K, split):
    gen = torch.Generator().manual_seed(M + N + K)
    a, b = torch.randn(M, K, generator=gen), torch.randn(K, N, generator=gen)
    whole = torch.zeros(M + 3, N + 2)
    c = whole[:M, :N]     # a view: the atomics skip what lies past it
    grid = (tj.cdiv(M, 32), tj.cdiv(N, 32), split)
    split_k_gemm[grid](a, b, c, M, N, K, BM=32, BN=32, BK=16, SPLIT=split)
    torch.testing.assert_close(c, a @ b, atol=1e-4, rtol=1e-4)
    assert torch.all(whole[M:] == 0) and torch.all(whole[:, N:] == 0)


def test_tile_atomics_go_through_the_generic_element_rule():
    compiled = split_k_gemm.compile(tj.TensorSpec((64, 64), tj.float32),
                                    tj.TensorSpec((64, 64), tj.float32),
                                    tj.TensorSpec((64, 64), tj.float32), 64, 64, 64,
                                    BM=32, BN=32, BK=16, SPLIT=2)
    record, = [r for r in compiled.dispatch_log if r.primitive == "atomic"]
    assert record.rule == "scalar"
    assert "tile.atomic(" in compiled.asm["ir"] and "op = add" in compiled.asm["ir"]
    # LLVM expands a float atomicrmw fadd into a cmpxchg loop on x86
    assert "atomicrmw fadd" in compiled.asm["llir"] or "cmpxchg" in compiled.asm["llir"]


@tj.kernel
def tile_atomic_ops(out, src, OP: tj.constexpr):
    t = tj.fragment((4, 8), tj.int32)
    tj.copy(t, src[0:4, 0:8])
    if OP == "max":
        tj.atomic_max(out[0:4, 0:8], t)
    elif OP == "min":
        tj.atomic_min(out[0:4, 0:8], t)
    else:
        tj.atomic_xchg(out[0:4, 0:8], t)


@pytest.mark.parametrize("op", ["max", "min", "xchg"])
def test_tile_atomic_max_min_xchg(op):
    gen = torch.Generator().manual_seed(3)
    src = torch.randint(-50, 50, (4, 8), generator=gen, dtype=torch.int32)
    out = torch.randint(-50, 50, (4, 8), generator=gen, dtype=torch.int32)
    expected = {"max": torch.maximum(out, src), "min": torch.minimum(out, src),
                "xchg": src}[op]
    tile_atomic_ops[(3,)](out, src, OP=op)
    assert torch.equal(out, expected)


# --------------------------------------------------------------------------- histograms
@tj.kernel
def histogram(x, hist, n, BINS: tj.constexpr, PER_THREAD: tj.constexpr):
    """Each thread counts PER_THREAD values into the CTA's shared bins, then the CTA adds its
    bins into the global histogram."""
    t = tj.thread_id()
    local = tj.alloc_shared((BINS,), tj.int32)
    if t < BINS:
        local[t] = 0
    tj.sync()
    base = (tj.cta_id(0) * THREADS + t) * PER_THREAD
    for k in range(PER_THREAD):
        if base + k < n:
            tj.atomic_add(local[x[base + k]], 1)
    tj.sync()
    if t < BINS:
        tj.atomic_add(hist[t], local[t])


@pytest.mark.parametrize("n", [1, 1000, 4097])
def test_histogram_in_shared_then_global_memory(n):
    gen = torch.Generator().manual_seed(n)
    x = torch.randint(0, 10, (n,), generator=gen, dtype=torch.int32)
    hist = torch.zeros(10, dtype=torch.int32)
    per_thread = 8
    histogram[(tj.cdiv(n, THREADS * per_thread),)](x, hist, n, BINS=10, PER_THREAD=per_thread,
                                                     num_warps=NUM_WARPS)
    assert torch.equal(hist, torch.bincount(x, minlength=10).int())


@tj.kernel
def uniform_counts(x, hist, n, BLOCK: tj.constexpr):
    """Uniform native code: one CPU unit stands for every thread of the CTA, and each of
    them adds 1, as on a GPU."""
    base = tj.cta_id(0) * BLOCK
    for k in range(BLOCK):
        if base + k < n:
            tj.atomic_add(hist[x[base + k]], 1)


def test_uniform_code_counts_every_thread_of_the_cta():
    x = torch.tensor([0, 1, 1, 3, 3, 3, 2], dtype=torch.int32)
    hist = torch.zeros(4, dtype=torch.int64)
    uniform_counts[(3,)](x, hist, 7, BLOCK=3, num_warps=NUM_WARPS)
    assert torch.equal(hist, torch.bincount(x, minlength=4) * THREADS)


# ------------------------------------------------------------------- old values, orders
@tj.kernel
def ticket(counter, tickets, total):
    """Every thread takes a ticket: the old values of one counter are all different."""
    t = tj.cta_id(0) * THREADS + tj.thread_id()
    tickets[t] = tj.atomic_add(counter[0], 1, sem="relaxed")
    tj.atomic_add(total[0], 2.5, sem="release", scope="sys")


def test_old_values_are_distinct_tickets():
    counter, total = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.float64)
    tickets = torch.full((3 * THREADS,), -1, dtype=torch.int32)
    ticket[(3,)](counter, tickets, total, num_warps=NUM_WARPS)
    assert sorted(tickets.tolist()) == list(range(3 * THREADS))
    assert counter.item() == 3 * THREADS and total.item() == 2.5 * 3 * THREADS


@tj.kernel
def uniform_old_value(counter, seen):
    """No thread index, but the old value is used: each thread must see its own."""
    old = tj.atomic_add(counter[0], 1)
    tj.atomic_max(seen[0], old)
    tj.atomic_min(seen[1], old)


def test_a_used_old_value_is_per_thread_even_in_uniform_code():
    counter = torch.zeros(1, dtype=torch.int32)
    seen = torch.tensor([-1, 1 << 30], dtype=torch.int32)
    uniform_old_value[(2,)](counter, seen, num_warps=NUM_WARPS)
    assert counter.item() == 2 * THREADS
    assert seen.tolist() == [2 * THREADS - 1, 0]


@tj.kernel
def element_ops(buf, old, val):
    if tj.thread_id() == 0:   # every thread runs native code: one of them here
        old[0] = tj.atomic_max(buf[0], val, sem="acquire", scope="cta")
        old[1] = tj.atomic_min(buf[1], val)
        old[2] = tj.atomic_xchg(buf[2], val)
        old[3] = tj.atomic_cas(buf[3], 5, val)   # 5: swapped
        old[4] = tj.atomic_cas(buf[4], 5, val)   # not 5: kept


def test_element_atomics_return_the_old_value():
    buf = torch.tensor([3, 3, 3, 5, 4], dtype=torch.int32)
    old = torch.zeros(5, dtype=torch.int32)
    element_ops[(1,)](buf, old, 9, num_warps=1)
    assert old.tolist() == [3, 3, 3, 5, 4]
    assert buf.tolist() == [9, 3, 9, 9, 4]


def test_sem_and_scope_are_typed_attributes_of_the_ir():
    compiled = element_ops.compile(tj.TensorSpec((5,), tj.int32),
                                   tj.TensorSpec((5,), tj.int32), 9)
    ir_text = compiled.asm["ir"]
    assert "op = max, order = acquire, sync_scope = cta" in ir_text
    assert "atomic_cas(" in ir_text
    assert "cmpxchg" in compiled.asm["llir"]


# ------------------------------------------------------------------ compare-and-swap
@tj.kernel
def first_writer_wins(flag, winner, payload):
    t = tj.cta_id(0) * THREADS + tj.thread_id()
    if tj.atomic_cas(flag[0], 0, t + 1) == 0:   # only one thread sees the 0
        winner[0] = t + 1
        tj.atomic_add(payload[0], 1)


def test_cas_first_writer_wins():
    flag, winner = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    payload = torch.zeros(1, dtype=torch.int32)
    first_writer_wins[(4,)](flag, winner, payload, num_warps=NUM_WARPS)
    assert flag.item() == winner.item() > 0 and payload.item() == 1


@tj.kernel
def locked_sum(lock, total, x):
    """A spin lock around a read-modify-write that is not atomic by itself; one thread per
    CTA takes it."""
    if tj.thread_id() == 0:
        while tj.atomic_cas(lock[0], 0, 1, sem="acquire") != 0:
            pass
        total[0] = total[0] + x[tj.cta_id(0)]
        tj.atomic_xchg(lock[0], 0, sem="release")


def test_spin_lock_with_cas():
    x = torch.arange(1, 201, dtype=torch.float64)
    lock, total = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.float64)
    locked_sum[(200,)](lock, total, x)
    assert total.item() == x.sum().item() and lock.item() == 0


@tj.kernel
def float_cas(buf, old):
    if tj.thread_id() == 0:
        old[0] = tj.atomic_cas(buf[0], 1.5, 2.5)
        old[1] = tj.atomic_cas(buf[1], 1.5, 2.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_cas_compares_floats(dtype):
    buf, old = torch.tensor([1.5, 3.0], dtype=dtype), torch.zeros(2, dtype=dtype)
    float_cas[(1,)](buf, old, num_warps=1)
    assert buf.tolist() == [2.5, 3.0] and old.tolist() == [1.5, 3.0]


# ------------------------------------------------------------------------- shuffles
@tj.kernel
def warp_sum(x, out):
    lane = tj.lane_id()
    v = x[tj.warp_id() * 32 + lane]
    for s in tj.static_range(5):
        v = v + tj.shuffle(v, 16 >> s, mode="xor")   # a butterfly: every lane gets the sum
    out[tj.warp_id() * 32 + lane] = v


def test_warp_reduction_with_xor_shuffles():
    gen = torch.Generator().manual_seed(5)
    x = torch.randint(-100, 100, (THREADS,), generator=gen).float()
    out = torch.zeros(THREADS)
    warp_sum[(1,)](x, out, num_warps=NUM_WARPS)
    values = x.tolist()
    for warp in range(NUM_WARPS):   # Python's butterfly, lane by lane
        lanes = values[warp * 32:(warp + 1) * 32]
        for s in range(5):
            lanes = [lanes[i] + lanes[i ^ (16 >> s)] for i in range(32)]
        assert out[warp * 32:(warp + 1) * 32].tolist() == lanes


@tj.kernel
def shuffle_modes(x, out, DELTA: tj.constexpr):
    lane = tj.lane_id()
    v = x[lane]
    out[0, lane] = tj.shuffle(v, DELTA)               # idx: lane DELTA's value
    out[1, lane] = tj.shuffle(v, DELTA, mode="down")
    out[2, lane] = tj.shuffle(v, DELTA, mode="up")
    out[3, lane] = tj.shuffle(v, DELTA, mode="xor")


@pytest.mark.parametrize("delta", [1, 3, 16])
def test_shuffle_modes_match_cuda(delta):
    x = torch.arange(100, 132, dtype=torch.int32)
    out = torch.zeros(4, 32, dtype=torch.int32)
    shuffle_modes[(1,)](x, out, DELTA=delta, num_warps=1)
    v = x.tolist()

    def source(lane, s):    # a lane outside the warp reads its own value (CUDA)
        return v[s] if 0 <= s < 32 else v[lane]
    assert out[0].tolist() == [v[delta] for _ in range(32)]
    assert out[1].tolist() == [source(i, i + delta) for i in range(32)]
    assert out[2].tolist() == [source(i, i - delta) for i in range(32)]
    assert out[3].tolist() == [source(i, i ^ delta) for i in range(32)]


# --------------------------------------------------------------------------- errors
def _check_located(err, fn, text):
    lines, start = inspect.getsourcelines(fn)
    assert err.file == inspect.getsourcefile(fn)
    assert err.line == start + next(i for i, line in enumerate(lines) if text in line), str(err)
    assert text in str(err) and "^" in str(err)


def atomic_on_a_value(x):
    v = x[0]
    tj.atomic_add(v, 1)


def cas_on_a_tile(x):
    tj.atomic_cas(x[0:4], 0, 1)


def bad_order(x):
    tj.atomic_add(x[0], 1, sem="seq_cst")


def atomic_on_a_fragment(x):
    t = tj.fragment((4,), tj.float32)
    tj.atomic_add(t, 1.0)


def shuffle_a_tile(x):
    t = tj.fragment((4,), tj.float32)
    tj.shuffle(t, 1)


@pytest.mark.parametrize("fn,message,at", [
    (atomic_on_a_value, "updates an element or a tile written in the call", "tj.atomic_add(v, 1)"),
    (cas_on_a_tile, "updates one element", "tj.atomic_cas(x[0:4], 0, 1)"),
    (bad_order, "sem= is one of relaxed, acquire, release, acq_rel", "sem=\"seq_cst\""),
    (atomic_on_a_fragment, "updates global or shared memory", "tj.atomic_add(t, 1.0)"),
    (shuffle_a_tile, "exchanges one scalar per lane", "tj.shuffle(t, 1)"),
])
def test_atomic_errors_point_at_the_call(fn, message, at):
    with pytest.raises(tj.CompilationError, match=message) as info:
        tj.kernel(fn)[(1,)](torch.zeros(8))
    _check_located(info.value, fn, at)


def test_the_element_an_atomic_updates_is_not_loaded():
    k = element_ops.compile(tj.TensorSpec((5,), tj.int32), tj.TensorSpec((5,), tj.int32), 9)
    assert "= load(" not in k.asm["ir"] and "= atomic(" in k.asm["ir"]


@tj.kernel
def warp_uniform_shuffle(x, out):
    """Native code that depends only on the warp: one CPU unit per warp, whose lanes all
    hold the same value, so every shuffle reads it back."""
    w = tj.warp_id()
    v = x[w]
    out[w] = tj.shuffle(v, 5, mode="xor") + tj.shuffle(v, 31) + tj.shuffle(v, 1, mode="down")


def test_shuffles_in_warp_units():
    x = torch.tensor([3.0, -2.0])
    out = torch.zeros(2)
    warp_uniform_shuffle[(1,)](x, out, num_warps=NUM_WARPS)
    assert out.tolist() == [9.0, -6.0]
    compiled = warp_uniform_shuffle.compile(tj.TensorSpec((2,), tj.float32),
                                            tj.TensorSpec((2,), tj.float32), num_warps=2)
    assert compiled.asm["ir"].count("warp_shuffle(") == 3
