"""Random integer programs with nested ``if``/``for``/``while``, ``break`` and ``continue``,
compiled for the CPU and run by every thread of two warps (``t`` is the thread id, ``w`` the
warp id, so control flow diverges between threads and warps), against Python running the
same text for each ``t``.

Values stay small (every assignment is clamped to [-1000, 1000], no products of two
variables), so 32-bit and Python arithmetic agree; ``while`` loops count up to ``n`` before
anything else, so every loop ends. The last test also has the threads exchange values
through shared memory between ``tj.sync()`` barriers (reached by every thread), against a
Python reference that runs the threads phase by phase."""
import importlib.util
import itertools
import re
import textwrap

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilejit as tj
from tilejit.knobs import knobs
from tilejit.passes.sync_hazards import SyncHazardError

_COUNTER = itertools.count()
RANGES = ["range(n)", "range(n, 0, -1)", "range(1, n, 2)", "range(n, -1, -2)", "range(m)",
          "range(n, m, step)"]


def _fill(draw, template: str, slots: dict) -> str:
    """Replace each ``$X`` of ``template`` with a fresh draw from ``slots[X]``."""
    return re.sub(r"\$(\w)", lambda match: draw(slots[match.group(1)]), template)


def expressions(names, depth=0):
    leaves = st.sampled_from(["a", "b", "acc", "n", "m", "t", "w", "0", "1", "3", *names])
    if depth >= 2:
        return leaves
    sub = st.deferred(lambda: expressions(names, depth + 1))
    cond = st.deferred(lambda: conditions(names, depth + 1))

    @st.composite
    def compound(draw):
        template = draw(st.sampled_from(["($E + $E)", "($E - $E)", "($E * 3)", "max($E, $E)",
                                         "min($E, $E)", "($E if $C else $E)"]))
        return _fill(draw, template, {"E": sub, "C": cond})
    return st.one_of(leaves, compound())


def conditions(names, depth=0):
    @st.composite
    def condition(draw):
        templates = ["($E < $E)", "($E == $E)", "($E >= $E)"]
        if depth < 2:
            templates += ["($C and $C)", "($C or $C)", "(not $C)"]
        return _fill(draw, draw(st.sampled_from(templates)), {
            "E": expressions(names, depth + 1), "C": conditions(names, depth + 1)})
    return condition()


@st.composite
def blocks(draw, names=(), depth=0, in_loop=False, indent="", extra=()):
    """Statements; ``extra`` are more simple statements to choose from."""
    lines = []
    for _ in range(draw(st.integers(1, 3))):
        assign = ["a = max(min($E, 1000), -1000)", "b = max(min($E, 1000), -1000)",
                  "acc = max(min(acc + $E, 1000), -1000)", *extra]
        jumps = ["break", "continue", "if $C:\n{inner}break", "if $C:\n{inner}continue"]
        compound = ["if $C:\n{body}", "if $C:\n{body}{indent}else:\n{body2}",
                    "for i{d} in {range}:\n{loop}",
                    "k{d} = 0\n{indent}while k{d} < n and $C:\n{inner}k{d} += 1\n{loop}"]
        choice = draw(st.sampled_from(assign + (jumps if in_loop else [])
                                      + (compound if depth < 2 else [])))
        inner = indent + "    "
        loop_names = [*names, f"i{depth}"] if "for i" in choice else [*names, f"k{depth}"]

        def nested(slot, *args):
            return draw(blocks(*args, extra=extra)) if slot in choice else ""
        text = choice.format(
            inner=inner, indent=indent, d=depth, range=draw(st.sampled_from(RANGES)),
            body=nested("{body}", names, depth + 1, in_loop, inner),
            body2=nested("{body2}", names, depth + 1, in_loop, inner),
            loop=nested("{loop}", loop_names, depth + 1, True, inner))
        lines.append(indent + _fill(draw, text, {"E": expressions(list(names)),
                                                 "C": conditions(list(names))}) + "\n")
    return "".join(lines)


TILE_OP = "tj.fill(tile, 1.0)"   # a tile primitive: every thread of its team must reach it
WARP_TEAM = "with tj.warp():"
REFUSALS = ("part of the team would reach the primitive",
            "needs a statically known set of active threads")
TILE_STATEMENTS = (TILE_OP, WARP_TEAM + "\n{inner}" + TILE_OP)   # at team cta, team warp


KERNEL = """
import tilejit as tj


@tj.kernel
def kernel(out, n, m, step):
    t = tj.thread_id()
    w = tj.warp_id()
    tile = tj.fragment((4,), tj.float32)
    s = tj.alloc_shared((64,), tj.int32)
    a = 0
    b = 1
    acc = 0
{kernel_body}
    out[t, 0] = a
    out[t, 1] = b
    out[t, 2] = acc
"""

PER_THREAD_REFERENCE = """
def reference(t, n, m, step):
    w = t // 32
    a = 0
    b = 1
    acc = 0
{reference_body}
    return [a, b, acc]
"""


def load(source: str, folder):
    name = f"tilejit_control_fuzz_{next(_COUNTER)}"
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(body: str, folder, n, m, step) -> None:
    kernel_body = textwrap.indent(body, " " * 4)
    reference_body = kernel_body.replace(TILE_OP, "pass").replace(WARP_TEAM, "if True:")
    module = load(KERNEL.format(kernel_body=kernel_body)
                  + PER_THREAD_REFERENCE.format(reference_body=reference_body), folder)
    out = torch.zeros(64, 3, dtype=torch.int32)
    module.kernel[(1,)](out, n, m, step, num_warps=2)
    expected = [module.reference(t, n, m, step) for t in range(64)]
    assert out.tolist() == expected, body


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(body=blocks(), n=st.integers(0, 6), m=st.integers(-2, 5), step=st.sampled_from([1, 2, -1]))
def test_programs_match_python(tmp_path, body, n, m, step):
    run(body, tmp_path, n, m, step)


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(body=blocks(extra=TILE_STATEMENTS), n=st.integers(0, 6), m=st.integers(-2, 5),
       step=st.sampled_from([1, 2, -1]))
def test_tile_primitives_under_control_flow_run_or_are_refused(tmp_path, body, n, m, step):
    """A tile primitive that only part of its team (the CTA, or a warp) might reach is a
    ScopeError when the kernel compiles; one that compiles never deadlocks and the results
    match Python. Per thread, the CTA's ``tile`` lives in shared memory, so warps filling
    it where no barrier orders them race: a SyncHazardError naming it where the compiler
    sees it (two branches of a divergent ``if``, or one after the other where a barrier
    would deadlock), else the race detector's LaunchError (every warp of a warp team
    filling the CTA's tile at once)."""
    try:
        run(body, tmp_path, n, m, step)
    except tj.ScopeError as err:   # divergent control, or a filter with an odd thread set
        assert any(reason in err.message for reason in REFUSALS), f"{err}\n{body}"
    except SyncHazardError as err:
        assert knobs.simt and "buffer tile" in err.message, f"{err}\n{body}"
    except tj.LaunchError as err:
        assert knobs.simt and "data race on shared buffer 'tile'" in err.message, \
            f"{err}\n{body}"


# -- threads exchanging values through shared memory between barriers ---------------------
@st.composite
def phases(draw, depth=0, indent="    "):
    """Items run by every thread: divergent blocks, shared-memory exchanges between two
    ``tj.sync()`` (only where every thread gets: at the top or in loops over ``range(n)``),
    and such loops. Returns (kernel text, reference text)."""
    names = [f"j{d}" for d in range(depth)]
    kernel, reference = [], []
    for index in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["block", "exchange", "exchange"]
                                    + (["loop"] if depth < 2 else [])))
        tag = f"{depth}_{index}_{draw(st.integers(0, 10**6))}"
        state = ", ".join(["t", "w", "a", "b", "acc", *names])
        if kind == "block":
            body = draw(blocks(names))
            kernel.append(textwrap.indent(body, indent))
            reference.append(textwrap.indent(
                f"def block_{tag}({state}):\n{textwrap.indent(body, '    ')}"
                f"    return a, b, acc\n"
                f"for t in range(THREADS):\n"
                f"    a, b, acc = state[t]\n"
                f"    state[t] = block_{tag}({state.replace('w', 't // 32')})\n", indent))
        elif kind == "exchange":
            value = draw(expressions(names))
            shift = draw(st.sampled_from([1, 5, 33, 63]))
            kernel.append(textwrap.indent(
                f"s[t] = max(min({value}, 1000), -1000)\n"
                f"tj.sync()\n"
                f"acc = max(min(acc + s[(t + {shift}) % 64], 1000), -1000)\n"
                f"tj.sync()\n", indent))
            reference.append(textwrap.indent(
                f"def value_{tag}({state}):\n    return max(min({value}, 1000), -1000)\n"
                f"shared = [value_{tag}({state.replace('w', 't // 32').replace('a, b, acc', '*state[t]')}) "
                f"for t in range(THREADS)]\n"
                f"for t in range(THREADS):\n"
                f"    a, b, acc = state[t]\n"
                f"    state[t] = (a, b, max(min(acc + shared[(t + {shift}) % 64], 1000), -1000))\n",
                indent))
        else:
            inner_kernel, inner_reference = draw(phases(depth + 1, indent + "    "))
            loop = f"for j{depth} in range(n):\n"
            kernel.append(indent + loop + inner_kernel)
            reference.append(indent + loop + inner_reference)
    return "".join(kernel), "".join(reference)


EXCHANGE_REFERENCE = """
THREADS = 64


def reference(n, m, step):
    state = [(0, 1, 0)] * THREADS
{reference_body}
    return [list(s) for s in state]
"""


@settings(max_examples=20, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(program=phases(), n=st.integers(0, 4), m=st.integers(-2, 5),
       step=st.sampled_from([1, 2, -1]))
def test_threads_exchanging_through_shared_memory_match_python(tmp_path, program, n, m, step):
    kernel_body, reference_body = program
    module = load(KERNEL.format(kernel_body=kernel_body)
                  + EXCHANGE_REFERENCE.format(reference_body=reference_body), tmp_path)
    out = torch.zeros(64, 3, dtype=torch.int32)
    module.kernel[(1,)](out, n, m, step, num_warps=2)
    assert out.tolist() == module.reference(n, m, step), kernel_body
