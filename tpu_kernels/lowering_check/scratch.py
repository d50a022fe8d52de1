"""Which grid axes carry state from step to step through scratch memory.

A kernel's scratch buffers (`scratch_shapes`) live for the whole grid: a step that reads one
before writing it at that step reads what an earlier step left there (a running sum, a
matmul accumulator, an online softmax's max). The grid runs in order, its last axis fastest,
so the state flows from each step to the next, except where the kernel starts it afresh:
`@pl.when(pl.program_id(b) == 0)` (a conjunction of such tests) writing the buffer first.
Started afresh whenever the axes `B` are all at 0, the state crosses from one index of
axis `a` to the next unless every axis of `B` comes after `a` (they wrap to 0 exactly
there). Those axes carry state: split between two TensorCores ("parallel"), the second core
starts from a scratch buffer no earlier step wrote (NaN in the TPU interpreter).

Read from the kernel body's jaxpr, without running it: a read of a scratch buffer (`get`,
`load`, `addupdate`) that no earlier unconditional write of this step precedes; a write
inside `pl.when` counts for the start-afresh test above, not as this step's write; one under
any other test (a scalar-prefetched flag, as Tokamax's splash attention and KDA kernels start
their accumulators, or `program_id(b) % 2 == 0`) makes the buffer `unknown`. Nested
bodies (jit, loops, `run_scoped`, both branches of a `cond`) are followed in order; a partial
write (`acc[:4] = ...`) counts as writing the buffer. A buffer touched in a way this does not
follow (a DMA, a semaphore, a body whose operands it cannot line up) is `unknown`: the check
neither fails an axis for it nor suggests marking any axis "parallel".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

READS = frozenset({"get", "load", "addupdate", "masked_load"})
WRITES = frozenset({"swap", "store", "masked_swap"})


@dataclass
class Carried:
    """What the body does with its scratch buffers (numbered from 0): those read at a step
    before the step wrote them (`reads`), the `program_id(b) == 0` conjunctions under which
    each is written afresh (`resets`), and those touched in a way this cannot follow
    (`unknown`: a DMA, a nested body whose operands it cannot line up)."""

    reads: set[int] = field(default_factory=set)
    resets: dict[int, list[frozenset[int]]] = field(default_factory=dict)
    unknown: set[int] = field(default_factory=set)

    def axes(self, n_grid: int) -> set[int]:
        """The grid axes the carried state crosses: axis a, unless some reset's axes all come
        after it (the state then starts afresh where a's index changes)."""
        axes: set[int] = set()
        for k in self.reads - self.unknown:
            resets = self.resets.get(k, [])
            axes |= {a for a in range(n_grid) if not any(r and min(r) > a for r in resets)}
        return axes

    def why(self, axis: int) -> str:
        """Why `axis` carries state, in words (for an axis in `axes`)."""
        found = []
        for k in sorted(self.reads - self.unknown):
            resets = self.resets.get(k, [])
            if any(r and min(r) > axis for r in resets):
                continue
            tests = " or ".join(
                " and ".join(f"pl.program_id({b}) == 0" for b in sorted(r)) for r in resets if r
            )
            found.append(
                f"scratch buffer {k} is read at a step before that step writes it, so it holds what "
                "an earlier step left"
                + (
                    f", and is written afresh only when {tests}"
                    if tests
                    else ", and nothing writes it afresh"
                )
            )
        return "; ".join(found)


def _jaxpr(j: Any) -> Any:
    return j if hasattr(j, "eqns") else j.jaxpr


def _inner(invars: list[Any], operands: list[Any], refs: dict[Any, int]) -> dict[Any, int]:
    """A nested body's variables that receive scratch buffers (literal operands are none)."""
    return {
        v: refs[o] for v, o in zip(invars, operands) if o is not None and not hasattr(o, "val") and o in refs
    }


def _zero_tests(var: Any, producers: dict[Any, Any]) -> frozenset[int] | None:
    """The axes b of a predicate that is a conjunction of `program_id(b) == 0`, else None."""
    if hasattr(var, "val"):  # a literal
        return None
    eqn = producers.get(var)
    if eqn is None:
        return None
    name = eqn.primitive.name
    if name == "convert_element_type":
        return _zero_tests(eqn.invars[0], producers)
    if name == "and":
        parts = [_zero_tests(v, producers) for v in eqn.invars]
        return None if any(p is None for p in parts) else frozenset().union(*parts)
    if name == "eq":
        a, b = eqn.invars
        for pid, zero in ((a, b), (b, a)):
            src = None if hasattr(pid, "val") else producers.get(pid)
            value = getattr(zero, "val", None)
            if (
                src is not None
                and src.primitive.name == "program_id"
                and value is not None
                and int(value) == 0
            ):
                return frozenset({int(src.params["axis"])})
    return None


def _sub_jaxprs(eqn: Any) -> list[Any]:
    from tpu_kernels.lowering.pallas_grid import sub_jaxprs

    subs = []
    for value in eqn.params.values():
        subs += sub_jaxprs(value)
    return subs


def _operands(eqn: Any, sub: Any) -> list[Any] | None:
    """The operands of `eqn` that `sub`'s inputs receive, in order, or None when unknown."""
    name = eqn.primitive.name
    if name == "while":
        body_n, cond_n = eqn.params.get("body_nconsts", 0), eqn.params.get("cond_nconsts", 0)
        if sub is _jaxpr(eqn.params["cond_jaxpr"]):
            operands = eqn.invars[:cond_n] + eqn.invars[cond_n + body_n :]
        else:
            operands = eqn.invars[cond_n:]
    elif name == "run_scoped":  # its body's first inputs are the buffers it allocates
        operands = [None] * (len(sub.invars) - len(eqn.invars)) + list(eqn.invars)
    else:
        operands = list(eqn.invars)
    return operands if len(operands) == len(sub.invars) else None


def _walk(jaxpr: Any, refs: dict[Any, int], written: set[int], out: Carried) -> set[int]:
    """Walk `jaxpr` in order: `refs`, its variables that are scratch buffer k; `written`, the
    buffers this step has written so far. Returns `written` after it."""
    written = set(written)
    producers = {v: e for e in jaxpr.eqns for v in e.outvars}
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        touched = {refs[v] for v in eqn.invars if not hasattr(v, "val") and v in refs}
        if not touched and not _sub_jaxprs(eqn):
            continue
        if name in READS:
            out.reads |= touched - written
            if name == "addupdate":
                written |= touched
        elif name in WRITES:
            written |= touched
        elif name == "cond":
            branches = [_jaxpr(b) for b in eqn.params["branches"]]
            after = [_walk(b, _inner(b.invars, eqn.invars[1:], refs), written, out) for b in branches]
            reset = _zero_tests(eqn.invars[0], producers) if len(after) == 2 else None
            if reset is not None:  # written when the test holds: the state starts afresh there
                for k in after[1] - after[0]:
                    out.resets.setdefault(k, []).append(reset)
            else:  # written under a test this cannot read (data, `% 2`): where it starts afresh is unknown
                out.unknown |= set.union(*after) - set.intersection(*after)
            written = set.intersection(*after)
        elif _sub_jaxprs(eqn):
            for sub in _sub_jaxprs(eqn):
                operands = _operands(eqn, sub)
                if operands is None:
                    out.unknown |= touched
                    continue
                written = _walk(sub, _inner(sub.invars, operands, refs), written, out)
        else:  # a DMA, a semaphore or anything else on a scratch buffer: not followed
            out.unknown |= touched
    return written


def carried(eqn: Any) -> Carried:
    """The scratch buffers one `pallas_call` carries from step to step (see the module doc)."""
    gm = eqn.params["grid_mapping"]
    n_scratch = int(getattr(gm, "num_scratch_operands", 0) or 0)
    out = Carried()
    if not n_scratch:
        return out
    body = _jaxpr(eqn.params["jaxpr"])
    first = len(body.invars) - n_scratch
    _walk(body, {v: k for k, v in enumerate(body.invars[first:])}, set(), out)
    return out


def forwarded(eqn: Any) -> set[int]:
    """The scratch buffers (numbered from 0) that hold nothing from step to step and whose
    values need not outlive a reduction or matmul: every step writes one before it reads it
    (neither carried nor `unknown`), and no reduction or matmul lies between its first and last
    access. The compiler forwards such a buffer's stores to its loads and does not allocate it
    (a v5e compiled 24-96 MiB of such scratch beside 8-32 MiB of blocks, its allocation the
    blocks' alone; docs/tpu-lowering-check.md); its values are body values
    (`temporaries.py`)."""
    from tpu_kernels.lowering_check import temporaries

    gm = eqn.params["grid_mapping"]
    n_scratch = int(getattr(gm, "num_scratch_operands", 0) or 0)
    if not n_scratch:
        return set()
    out = carried(eqn)
    body = _jaxpr(eqn.params["jaxpr"])
    refs = {v: k for k, v in enumerate(body.invars[len(body.invars) - n_scratch :])}
    steps: list[tuple[str, list, list]] = []
    temporaries._linear(body, {}, steps)
    barriers = [pos for pos, (prim, _, _) in enumerate(steps) if prim in temporaries.BARRIERS]
    found = set()
    for v, k in refs.items():
        if k in out.reads or k in out.unknown:
            continue
        at = [pos for pos, (prim, used, _) in enumerate(steps) if v in used]
        if not at or not any(steps[pos][0] in WRITES for pos in at):
            continue
        if not any(at[0] < b < at[-1] for b in barriers):
            found.add(k)
    return found


__all__ = ["Carried", "carried", "forwarded"]
