"""Mosaic / Pallas lowering errors in plain words.

The TPU lowering of Pallas raises long messages (a block spec's repr, an index
map's jaxpr, a link); `explain` turns the common ones into one line that says
what is wrong and what to do, and keeps the raw message beside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Kinds of problems `explain` recognises (also the `kind` in `tpu-kernels check --json`).
BLOCK_SHAPE = "block-shape"
UNSUPPORTED_OP = "unsupported-op"
DTYPE = "dtype"
VMEM = "vmem"
RACE = "race"
COVERAGE = "coverage"  # output elements that no grid step writes (lowering_check/coverage.py)
OUT_OF_BOUNDS = "out-of-bounds"  # a block entirely outside its array (lowering_check/coverage.py)
SEMANTICS = "semantics"  # an accumulation grid axis marked "parallel" (lowering_check/semantics.py)
ALIASING = "aliasing"  # a mutated argument its pallas_call does not alias (lowering_check/aliasing.py)
OTHER = "other"


@dataclass(frozen=True)
class Explanation:
    kind: str  # one of the constants above
    message: str  # one line, plain words, with the fix
    raw: str  # the original exception: type and message


def _raw(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


_BLOCK_DETAILS = re.compile(
    r"Block spec for (?P<what>\S+) in pallas_call (?P<kernel>\S+)(?: at (?P<where>.+?))? has block shape "
    r"\((?P<block>.*?)\), array shape \((?P<array>.*?)\)",
    re.S,
)
_BLOCK_DIM = re.compile(
    r"(?:Blocked\(block_size=(\d+)\)|Squeezed\(\)|Element\(block_size=(\d+)[^)]*\)|(\d+))"
)


def _dims(text: str) -> list[str]:
    dims = []
    for m in _BLOCK_DIM.finditer(text):
        if m.group(0).startswith("Squeezed"):
            dims.append("None")
        else:
            dims.append(m.group(1) or m.group(2) or m.group(3))
    return dims


def _operand(what: str) -> str:
    """`args[0]` -> `input 0`, `outputs[1]` -> `output 1` (JAX's names for pallas_call operands)."""
    m = re.fullmatch(r"(args|outputs)\[(\d+)\](.*)", what)
    if not m:
        return what
    return f"{'input' if m[1] == 'args' else 'output'} {m[2]}{m[3]}"


def _misaligned(block: list[str], array: list[str]) -> str:
    """Which of the last two block dimensions break the (8, 128) rule, in words."""
    bad = []
    for b, a, multiple in zip(block[-2:], array[-2:], (8, 128)):
        if b.isdigit() and a.isdigit() and int(b) % multiple and b != a:
            bad.append(f"{b} is neither a multiple of {multiple} nor the array's {a}")
    return (
        ", and ".join(bad) or "its last two dimensions must be divisible by 8 and 128, or equal the array's"
    )


def _block_shape(error: BaseException, text: str) -> Explanation | None:
    if "block shape" not in text or "Pallas TPU lowering" not in text:
        return None
    m = _BLOCK_DETAILS.search(text)
    where = ""
    if m:
        block, array = _dims(m["block"]), _dims(m["array"])
        where = (
            f"block shape ({', '.join(block)}) of {_operand(m['what'])} (array shape ({', '.join(array)}))"
        )
        where += f" in kernel {m['kernel']}" + (f" at {m['where']}" if m["where"] else "")
    else:
        where = "a block shape"
    if "divisible by 8 and 128" in text:
        rule = "is not TPU-aligned: " + (
            _misaligned(block, array) if m else "its last two dimensions must be divisible by 8 and 128"
        )
        fix = "choose blocks whose last two dimensions are multiples of 8 and 128 (e.g. (256, 512)) or the whole dimensions"
    elif "rank 1 block" in text:
        rule = (
            "is not TPU-aligned: a 1-D block must be the whole array, a multiple of 1024 elements, "
            "or a power of two of at least 128 * (32 // bits) elements"
        )
        fix = "reshape the array to 2-D (rows, 128*m) or use a block of 1024*k elements"
    elif "memory space ANY" in text:
        rule = "is in memory space ANY (HBM) but is not the whole array with an all-zero index map"
        fix = "use a full-array BlockSpec(memory_space=pl.ANY) and copy windows by hand, or a VMEM block"
    elif "rank >= 1" in text:
        rule = "is 0-D; Mosaic needs blocks of rank >= 1"
        fix = "give scalars shape (1, 1), or pass them in SMEM"
    else:
        rule = "is not supported by the TPU lowering"
        fix = "see https://docs.jax.dev/en/latest/pallas/grid_blockspec.html"
    return Explanation(BLOCK_SHAPE, f"{where} {rule}; {fix}.", _raw(error))


_UNIMPLEMENTED = re.compile(r"Unimplemented primitive in Pallas TPU lowering(?: for \w+)?: (\w+)")


def _unsupported(error: BaseException, text: str) -> Explanation | None:
    m = _UNIMPLEMENTED.search(text)
    if m:
        return Explanation(
            UNSUPPORTED_OP,
            f"the kernel uses `{m[1]}`, which Pallas cannot lower for the TPU; compute it with "
            "supported operations (elementwise math, reductions over the last axes, dot, iota, "
            "where, broadcasting), or move it outside the kernel into plain JAX.",
            _raw(error),
        )
    if isinstance(error, NotImplementedError) or "not supported on TPU" in text or "not implemented" in text:
        first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
        return Explanation(
            UNSUPPORTED_OP,
            f"the TPU lowering does not support an operation in the kernel ({first}); rewrite that "
            "step with supported operations, or move it outside the kernel.",
            _raw(error),
        )
    return None


_DTYPE_HINTS = (
    "VectorElementTypeInterface",
    "Unsupported type",
    "unsupported dtype",
    "64-bit",
    "element type",
)


def _dtype(error: BaseException, text: str) -> Explanation | None:
    if not any(h in text for h in _DTYPE_HINTS):
        return None
    return Explanation(
        DTYPE,
        "a value in the kernel has a dtype Mosaic cannot hold in vector registers (64-bit and "
        "complex types are not supported on TPU); compute in float32/bfloat16/int32 and cast "
        "outside the kernel.",
        _raw(error),
    )


_VMEM_HINTS = re.compile(r"vmem|scoped allocation|RESOURCE_EXHAUSTED", re.I)


def _vmem(error: BaseException, text: str) -> Explanation | None:
    if not (_VMEM_HINTS.search(text) and re.search(r"exceed|out of memory|not enough|too large", text, re.I)):
        return None
    return Explanation(
        VMEM,
        "the kernel's blocks and scratch buffers do not fit in VMEM; use smaller blocks, fewer "
        "pipeline buffers (pipeline_mode=pl.Buffered(1) for blocks that do not change), or raise "
        "the limit with pltpu.CompilerParams(vmem_limit_bytes=...).",
        _raw(error),
    )


def explain(error: BaseException) -> Explanation:
    """The plain-words explanation of a lowering error (falls back to its first line)."""
    cause = error
    # tpu_kernels wraps lowering errors in KernelError with the op's name; explain the cause.
    while cause.__cause__ is not None and type(cause).__module__.startswith("tpu_kernels"):
        cause = cause.__cause__
    text = str(cause)
    for rule in (_block_shape, _unsupported, _dtype, _vmem):
        found = rule(cause, text)
        if found is not None:
            return found
    first = text.strip().splitlines()[0] if text.strip() else ""
    return Explanation(OTHER, f"{type(cause).__name__}: {first}", _raw(cause))
