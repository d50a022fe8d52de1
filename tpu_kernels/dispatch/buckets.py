"""Bounded dynamism: pad a varying dimension up to a bucket, run that bucket's kernel, slice back.

On a TPU every new shape is a new executable, and a workload whose sequence length
varies call to call compiles once per length (rmsnorm over 24 random lengths in 1-512:
24 compiles, bench/varlen.py). An op that declares which dimensions may be padded

    @tpu_kernel("mylib::norm", buckets={"x": {-2: powers_of_two(128)}, "y": {-2: powers_of_two(128)}})

(or, the same, `buckets=bucket_rows("x", "y")`) runs every length in a bucket with
the bucket's one executable: its device kernels (CPU, CUDA, TPU) pad the declared
dimensions up to the bucket's size (with the bucketing's pad value), call the kernel,
and slice every output back to the shape the unpadded call has. Everything above the
device kernel sees only true shapes: the fake function, autograd (the backward op is
bucketed the same way, and its incoming gradients are padded with zeros: a padded
position of an output does not exist, so its cotangent is zero),
`torch.compile(dynamic=True)` (one graph whose op calls pad at run time), checked
mode, DTensor.

One length per op. All declared dimensions of one call carry the same true length n
(a sequence length, a row count): each is either n or 1 (a size-1 dimension
broadcasts and stays as it is). The op pads them all to `bucket_size(n, spec)`.
Calls where no declared dimension exists (a tensor of lower rank) or where two
declared dimensions disagree run unpadded, so the kernel sees and reports the
caller's shapes. An empty dimension (n == 0) is not padded: the kernels skip empty
inputs.

Where padding is correct depends on the kernel, which is why an op declares it:
padding a dimension the kernel treats row by row (rows are independent) changes
nothing in the true rows. Padding a dimension the kernel reduces over is wrong
unless the pad value is neutral for the reduction (0 for a sum, -inf for a max) and
the kernel is told the true length: name an optional tensor parameter in `length=`
and the op passes the true length there as an int32 scalar tensor (a runtime value,
like the lengths Pallas kernels take as scalar prefetch, so every length in a bucket
shares one executable; a static int would compile once per length again).

The schedules: `multiple_of(m)` (the next multiple of m), `buckets_of([sizes])` (an
explicit list) and `powers_of_two(m)`, the row schedule the shipped kernels declare
(`bucket_rows`' default): a handful of rows (a decode step's (batch, 1, hidden), a small
batch) pads to the dtype's sublane tile (8 rows of 32-bit, 16 of 16-bit, 32 of 8-bit
data: one TPU vreg tile, so a smaller bucket would add compiles and save no work), up
to m rows to the next power of two, and longer lengths to the next multiple of m. With
multiple_of(128) a decode step padded 1 row to 128 (128x the work of the most frequent
call of generation); with powers_of_two(128) it pads to 8 and lengths 1..m share
log2(m / tile) + 1 buckets.

`bucket_size(n, spec, dtype)` is public so code outside an op (padding attention key
and value lengths, say) pads to the same buckets.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from tpu_kernels.definition.signature import Kind, Signature
from tpu_kernels.errors import InvalidArgumentError, OpDefinitionError, TpuKernelsError


@dataclasses.dataclass(frozen=True)
class Bucketing:
    """How a dimension is padded: `size(n)` is the padded size of a dimension of size n."""

    pad: float | int | bool = 0  # the value padded positions hold

    def size(self, n: int, itemsize: int = 4) -> int:  # pragma: no cover - abstract
        """The padded size for n >= 1; `itemsize`: the bytes per element of the smallest
        padded dtype of the call (schedules that depend on the sublane tile read it)."""
        raise NotImplementedError

    def sizes_equal(self, other: Bucketing) -> bool:
        """Both give every length the same padded size (the pad values may differ)."""
        return dataclasses.replace(self, pad=0) == dataclasses.replace(other, pad=0)


@dataclasses.dataclass(frozen=True)
class MultipleOf(Bucketing):
    multiple: int = 128

    def size(self, n: int, itemsize: int = 4) -> int:
        return -(-n // self.multiple) * self.multiple

    def __repr__(self) -> str:
        return f"multiple_of({self.multiple}, pad={self.pad!r})"


@dataclasses.dataclass(frozen=True)
class BucketsOf(Bucketing):
    sizes: tuple[int, ...] = ()

    def size(self, n: int, itemsize: int = 4) -> int:
        i = bisect.bisect_left(self.sizes, n)
        if i == len(self.sizes):
            raise BucketOverflowError(
                f"a length of {n} exceeds the largest bucket {self.sizes[-1]} of {self!r}"
            )
        return self.sizes[i]

    def __repr__(self) -> str:
        return f"buckets_of({list(self.sizes)}, pad={self.pad!r})"


def sublane_tile(itemsize: int) -> int:
    """Rows in one TPU vreg tile for elements of `itemsize` bytes: 8 for 32-bit (and 64-bit,
    which a TPU emulates with 32-bit pairs), 16 for 16-bit, 32 for 8-bit data."""
    return max(8, 32 // max(1, itemsize))


@dataclasses.dataclass(frozen=True)
class PowersOfTwo(Bucketing):
    multiple: int = 128
    minimum: int | None = None  # None: the sublane tile of the call's dtype

    def size(self, n: int, itemsize: int = 4) -> int:
        if n > self.multiple:
            return -(-n // self.multiple) * self.multiple
        low = self.minimum if self.minimum is not None else sublane_tile(itemsize)
        # a power of two at least the tile, but never above the multiple (the bucket that
        # holds every length up to it, whether or not the multiple is a power of two)
        return min(self.multiple, max(low, 1 << (n - 1).bit_length()))

    def __repr__(self) -> str:
        low = "the sublane tile" if self.minimum is None else self.minimum
        return f"powers_of_two({self.multiple}, minimum={low}, pad={self.pad!r})"


class BucketOverflowError(ValueError):
    """A length above the largest of an explicit list of buckets."""


def _check_pad(what: str, pad: Any) -> None:
    if not isinstance(pad, (bool, int, float)):
        raise OpDefinitionError(f"{what}: pad must be an int, float or bool, got {pad!r}.")


def multiple_of(multiple: int, *, pad: float | int | bool = 0) -> MultipleOf:
    """Pad a dimension of size n up to the next multiple of `multiple` (n = 0 stays 0).

    Lengths 1..L compile ceil(L / multiple) executables. TPU tiles are (8, 128): a
    multiple of 8 (second-to-last dimension) or 128 (last) also keeps blocks aligned.
    """
    if isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1:
        raise OpDefinitionError(f"multiple_of: multiple must be a positive int, got {multiple!r}.")
    _check_pad("multiple_of", pad)
    return MultipleOf(pad=pad, multiple=multiple)


def powers_of_two(
    multiple: int = 128, *, minimum: int | None = None, pad: float | int | bool = 0
) -> PowersOfTwo:
    """Small lengths stay small: n up to `minimum` pads to `minimum` (default: the
    sublane tile of the call's dtype, 8 rows of 32-bit, 16 of 16-bit, 32 of 8-bit data),
    n up to `multiple` to the next power of two (capped at `multiple`), longer lengths
    to the next multiple of `multiple`.

    Lengths 1..L compile at most log2(multiple / minimum) + 1 + ceil(L / multiple) - 1
    executables: 5 for 1..128 rows of float32 with the default 128, then one per 128."""
    if isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1:
        raise OpDefinitionError(f"powers_of_two: multiple must be a positive int, got {multiple!r}.")
    if minimum is not None and (isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 1):
        raise OpDefinitionError(
            f"powers_of_two: minimum must be a positive int or None (the dtype's sublane tile), "
            f"got {minimum!r}."
        )
    _check_pad("powers_of_two", pad)
    return PowersOfTwo(pad=pad, multiple=multiple, minimum=minimum)


def buckets_of(sizes: Sequence[int], *, pad: float | int | bool = 0) -> BucketsOf:
    """Pad a dimension of size n up to the smallest of `sizes` that holds it.

    A length above the largest size is an error (`BucketOverflowError`, a ValueError):
    the buckets bound the executables an op may compile."""
    try:
        values = sorted(set(sizes))
    except TypeError:
        raise OpDefinitionError(
            f"buckets_of: sizes must be a list of positive ints, got {sizes!r}."
        ) from None
    if not values or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in values):
        raise OpDefinitionError(
            f"buckets_of: sizes must be a non-empty list of positive ints, got {sizes!r}."
        )
    _check_pad("buckets_of", pad)
    return BucketsOf(pad=pad, sizes=tuple(values))


ROWS = PowersOfTwo(multiple=128)  # bucket_rows' default schedule


def bucket_rows(*names: str, bucketing: Bucketing = ROWS, dim: int = -2) -> dict[str, dict[int, Bucketing]]:
    """`buckets=` for an op whose named tensors (parameters or outputs) share one padded
    row dimension: `bucket_rows("x", "out")` is `{"x": {-2: powers_of_two(128)}, "out": {-2:
    powers_of_two(128)}}`. The shipped row-wise kernels (softmax, rmsnorm, scale_add) declare
    theirs this way; per-tensor pad values or dims need the dict spelled out."""
    if not names or any(not isinstance(n, str) or not n for n in names):
        raise OpDefinitionError(f"bucket_rows: name one or more tensors (strings), got {names!r}.")
    if not isinstance(bucketing, Bucketing):
        raise OpDefinitionError(
            f"bucket_rows: bucketing must be multiple_of(...), powers_of_two(...) or buckets_of(...), "
            f"got {bucketing!r}."
        )
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise OpDefinitionError(f"bucket_rows: dim must be an int, got {dim!r}.")
    return {name: {dim: bucketing} for name in names}


def bucket_size(n: int, spec: Bucketing, dtype: torch.dtype = torch.float32) -> int:
    """The padded size of a dimension of size `n` under `spec` (0 stays 0), for tensors of
    `dtype` (powers_of_two's smallest bucket is its sublane tile).

    For code outside an op that pads to the same buckets, e.g. key/value lengths:
    `bucket_size(37, multiple_of(128)) == 128`, `bucket_size(1, powers_of_two(128)) == 8`."""
    if not isinstance(spec, Bucketing):
        raise TypeError(
            f"bucket_size: spec must be multiple_of(...), powers_of_two(...) or buckets_of(...), "
            f"got {spec!r}."
        )
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"bucket_size: n must be a non-negative int, got {n!r}.")
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"bucket_size: dtype must be a torch.dtype, got {dtype!r}.")
    return 0 if n == 0 else spec.size(n, dtype.itemsize)


# ---- an op's declaration -------------------------------------------------------------

Dims = tuple[tuple[int, Bucketing], ...]


@dataclasses.dataclass(frozen=True)
class Plan:
    """An op's checked declaration: what its device kernels pad and slice."""

    op: str
    inputs: tuple[tuple[int, str, Dims], ...]  # (param index, param name, dims) of tensor params
    outputs: dict[int, Dims]  # output index -> dims (undeclared outputs: sliced by eval_shape)
    length: int | None  # index of the parameter that receives the true length
    spec: Bucketing  # one bucketing's sizes for the whole op
    declared: Mapping[str, Mapping[int, Bucketing]]  # as given, normalized (for the backward)
    length_name: str | None = None


def plan(
    op: str,
    sig: Signature,
    output_names: Sequence[str],
    buckets: Any,
    length: str | None,
    mutates_args: Sequence[str] = (),
    *,
    grads_of: Mapping[str, Mapping[int, Bucketing]] | None = None,
    output_dims: Mapping[int, Dims] | None = None,
) -> Plan | None:
    """Check an op's `buckets=` / `length=` declaration; None when it declares none.

    `buckets` maps a tensor parameter's name, or an output's (which the backward op
    receives under that name and as `grad_<name>`), to {dim: bucketing}; negative dims
    count from the end of each call's tensor. An output declared with no dims (`{}`)
    is returned as the kernel gives it; an undeclared one is sliced to the shape the
    op's fake function derives for the unpadded call (a trace per new shape).
    For a backward op (`backward_plan`): `grads_of`, its incoming-gradient parameters
    -> the dims of their output (padded with 0); `output_dims`, its outputs' dims.
    """
    if buckets is None:
        if length is not None:
            raise OpDefinitionError(f"{op}: length={length!r} needs buckets= to say what is padded.")
        return None
    if not isinstance(buckets, Mapping) or not (buckets or grads_of):
        raise OpDefinitionError(
            f"{op}: buckets must be a non-empty dict {{argument name: {{dim: multiple_of(...) or "
            f"buckets_of(...)}}}}, got {buckets!r}."
        )
    if mutates_args:
        raise OpDefinitionError(
            f"{op}: buckets= cannot be declared on an op that mutates {list(mutates_args)}: the kernel "
            "would write into padded copies, not into the caller's tensors."
        )
    params = {p.name: (i, p) for i, p in enumerate(sig.params)}
    clash = set(params) & set(output_names)
    declared: dict[str, dict[int, Bucketing]] = {}
    inputs: list[tuple[int, str, Dims]] = []
    outputs: dict[int, Dims] = {}
    spec: Bucketing | None = None
    for name, dims in buckets.items():
        if name in clash:
            raise OpDefinitionError(
                f"{op}: buckets names '{name}', which is both a parameter and an output; rename one."
            )
        if name not in params and name not in output_names:
            raise OpDefinitionError(
                f"{op}: buckets names '{name}', which is neither a tensor parameter "
                f"({[p.name for p in sig.tensor_params]}) nor an output ({list(output_names)})."
            )
        if name in params and params[name][1].kind not in (Kind.TENSOR, Kind.OPTIONAL_TENSOR):
            raise OpDefinitionError(
                f"{op}: buckets names '{name}', a {params[name][1].schema_type} parameter; only Tensor "
                "parameters can be padded."
            )
        if not isinstance(dims, Mapping) or (not dims and name in params):
            raise OpDefinitionError(
                f"{op}: buckets['{name}'] must be a non-empty dict {{dim: multiple_of(...) or "
                f"buckets_of(...)}}, got {dims!r}."
            )
        entries: dict[int, Bucketing] = {}
        for dim, b in dims.items():
            if isinstance(dim, bool) or not isinstance(dim, int):
                raise OpDefinitionError(f"{op}: buckets['{name}'] has dim {dim!r}; dims are ints.")
            if not isinstance(b, Bucketing):
                raise OpDefinitionError(
                    f"{op}: buckets['{name}'][{dim}] is {b!r}; expected tpu_kernels.multiple_of(n), "
                    "tpu_kernels.powers_of_two(n) or tpu_kernels.buckets_of([sizes])."
                )
            if spec is None:
                spec = b
            elif not spec.sizes_equal(b):
                raise OpDefinitionError(
                    f"{op}: buckets['{name}'][{dim}] is {b!r} but another dim is {spec!r}; an op pads one "
                    "length, so every declared dim uses the same buckets (pad values may differ)."
                )
            entries[dim] = b
        declared[name] = entries
        dims_t = tuple(sorted(entries.items()))
        if name in params:
            inputs.append((params[name][0], name, dims_t))
        else:
            outputs[list(output_names).index(name)] = dims_t
    for g, dims in (grads_of or {}).items():  # a gradient is padded where its output was, with 0
        for b in dims.values():
            spec = spec or b
        inputs.append(
            (params[g][0], g, tuple(sorted((d, dataclasses.replace(b, pad=0)) for d, b in dims.items())))
        )
    outputs.update(output_dims or {})
    if not inputs:
        raise OpDefinitionError(f"{op}: buckets declares only outputs; name the input dims that are padded.")
    length_idx = None
    if length is not None:
        p = params.get(length, (None, None))[1]
        if p is None or p.kind is not Kind.OPTIONAL_TENSOR or p.default is not None:
            raise OpDefinitionError(
                f"{op}: length={length!r} must name an optional tensor parameter defaulting to None "
                f"(`{length}: jax.Array | None = None`); the op passes the true length there as an "
                "int32 scalar when it pads."
            )
        if length in declared:
            raise OpDefinitionError(f"{op}: length={length!r} names a parameter that buckets pads.")
        length_idx = params[length][0]
    return Plan(op, tuple(inputs), outputs, length_idx, spec, declared, length)


def backward_plan(
    fwd: Plan, bwd_sig: Signature, output_names: Sequence[str], wrt: Sequence[str]
) -> Plan | None:
    """The backward op's plan, from the forward's: its parameters named like the
    forward's declared inputs and outputs are padded the same way, incoming gradients
    (`grad_<output>`) where their output is, with 0; the true length is passed on
    when it takes the same parameter. `wrt`: the forward input each of the backward's
    outputs is the gradient of; a gradient has its input's padded dims (none for an
    input that is not padded)."""
    names = {p.name for p in bwd_sig.params}
    declared = {n: d for n, d in fwd.declared.items() if n in names}
    grads = {f"grad_{o}": o for o in output_names if f"grad_{o}" in names and o in fwd.declared}
    if not declared and not grads:
        return None
    out_dims = {j: tuple(sorted(fwd.declared.get(w, {}).items())) for j, w in enumerate(wrt)}
    length = fwd.length_name if fwd.length_name in names else None
    return plan(
        bwd_sig.op, bwd_sig, (), declared, length,
        grads_of={g: fwd.declared[o] for g, o in grads.items()}, output_dims=out_dims,
    )  # fmt: skip


# ---- the device kernels' wrapper ------------------------------------------------------


class PaddedKernel:
    """A device kernel that pads the declared dims to their bucket and slices the outputs.

    `out_shapes(values)`: the unpadded call's output shapes (the op's derived fake),
    for outputs the plan does not declare."""

    def __init__(
        self, plan_: Plan, sig: Signature, kernel: Callable, out_shapes: Callable[[list[Any]], list]
    ) -> None:
        self.plan = plan_
        self.sig = sig
        self.kernel = kernel
        self.out_shapes = out_shapes
        self._n_pos = sum(not p.keyword_only for p in sig.params)
        self._kw = [p.name for p in sig.params if p.keyword_only]

    def __getattr__(self, name: str) -> Any:
        # the wrapped kernel's own API (the TPU kernel's inner_op, mesh_op) stays reachable
        if name == "kernel":
            raise AttributeError(name)
        return getattr(self.kernel, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values = self.sig.values(args, kwargs)
        padded = self.pad(values)
        if padded is None:
            return self.kernel(*args, **kwargs)
        new_values, n, size = padded
        try:
            result = self.kernel(*new_values[: self._n_pos], **dict(zip(self._kw, new_values[self._n_pos :])))
        except TpuKernelsError as e:
            self._name_callers_shapes(e, values, new_values, n, size)
            raise
        return self.unpad(result, values, n, size)

    def _name_callers_shapes(
        self, e: BaseException, values: list[Any], new: list[Any], n: int, size: int
    ) -> None:
        """The kernel's error describes the padded arguments ("x=int32[128, 8]"): name the
        caller's shapes instead, and add a note saying what was padded (the kernel's own words,
        quoted after the summary, still see the padded shapes)."""
        text = str(e)
        padded, still_named = [], False
        for p, old, t in zip(self.sig.params, values, new):
            if t is old or not isinstance(t, torch.Tensor):
                continue
            dtype = str(t.dtype).removeprefix("torch.")
            text = text.replace(f"{p.name}={dtype}{list(t.shape)}", f"{p.name}={dtype}{list(old.shape)}")
            padded.append(f"'{p.name}' {tuple(old.shape)} -> {tuple(t.shape)}")
            still_named |= str(tuple(t.shape)) in text or str(list(t.shape)) in text
        e.args = (text, *e.args[1:])
        if still_named:
            e.add_note(
                f"{self.plan.op} pads its bucketed dims ({n} -> {size}) before the kernel runs "
                f"({', '.join(padded)}): the shapes the kernel's own words name are the padded ones."
            )

    def needs_padding(self, values: Any) -> bool:
        """Whether a call with these values (one per parameter) is padded, or has its
        length filled in: when not, the kernel can be called with them as they are (the
        eager shortcut does, with the key it built)."""
        if self.plan.length is not None:
            return True
        try:
            found = self._lengths(values)
        except ValueError:
            return True  # too long for the buckets: the full path raises
        return found is not None and found[2] != found[1]

    def _lengths(self, values: Any) -> tuple[list[tuple[int, int, Bucketing, int]], int, int] | None:
        """(the declared dims found: (param index, dim, bucketing, size), the true length,
        the padded size), or None when the call is not padded."""
        plan_ = self.plan
        found: list[tuple[int, int, Bucketing, int]] = []
        seen: set[tuple[int, int]] = set()  # dims 0 and -2 of a 2-D tensor are one dim
        itemsize = 8  # the smallest of the padded tensors': its sublane tile holds the others'
        for i, _, dims in plan_.inputs:
            t = values[i]
            if not isinstance(t, torch.Tensor):
                continue
            for dim, b in dims:
                d = dim + t.dim() if dim < 0 else dim
                if 0 <= d < t.dim() and (i, d) not in seen:
                    seen.add((i, d))
                    found.append((i, d, b, t.shape[d]))
                    itemsize = min(itemsize, t.dtype.itemsize)
        if not found:
            return None
        n = max(s for *_, s in found)
        if n == 0 or any(s not in (n, 1) for *_, s in found):
            return None  # empty, or shapes the kernel must judge itself
        try:
            size = plan_.spec.size(n, itemsize)
        except BucketOverflowError as e:
            names = sorted({name for i, name, _ in plan_.inputs if any(j == i for j, *_ in found)})
            raise InvalidArgumentError(f"{plan_.op}: arguments {names}: {e}.") from None
        return found, n, size

    def pad(self, values: list[Any]) -> tuple[list[Any], int, int] | None:
        """-> (values with the declared dims padded, the true length, the padded size),
        or None when the call is not padded."""
        plan_ = self.plan
        if plan_.length is not None and values[plan_.length] is not None:
            raise InvalidArgumentError(
                f"{plan_.op}: argument '{plan_.length_name}' is filled in by the op with the true "
                "length of its padded dims; call it without that argument."
            )
        lengths = self._lengths(values)
        if lengths is None:
            return None
        found, n, size = lengths
        new = list(values)
        for i, d, b, s in found:
            if s != n or size == n:
                continue  # a broadcast dim, or a length that is its own bucket
            t = new[i]
            shape = list(t.shape)
            shape[d] = size
            out = t.new_full(shape, b.pad)
            out.narrow(d, 0, n).copy_(t)
            new[i] = out
        if plan_.length is not None:
            device = next(t.device for t in values if isinstance(t, torch.Tensor))
            new[plan_.length] = torch.tensor(n, dtype=torch.int32, device=device)
        return new, n, size

    def unpad(self, result: Any, values: list[Any], n: int, size: int) -> Any:
        if size == n:
            return result
        single = isinstance(result, torch.Tensor)
        outs = [result] if single else list(result)
        shapes = None
        for j, o in enumerate(outs):
            dims = self.plan.outputs.get(j)
            if dims is not None:
                done = set()
                for dim, _ in dims:
                    d = dim + o.dim() if dim < 0 else dim
                    if 0 <= d < o.dim() and o.shape[d] == size and d not in done:
                        done.add(d)
                        o = o.narrow(d, 0, n)
            else:
                if shapes is None:
                    shapes = self.out_shapes(values)
                for d, (have, want) in enumerate(zip(o.shape, shapes[j])):
                    if have != want:
                        o = o.narrow(d, 0, want)
            # The fake promises contiguous outputs (compiled code relies on the strides).
            outs[j] = o if o.is_contiguous() else o.contiguous()
        if single:
            return outs[0]
        return type(result)(outs) if isinstance(result, tuple) else outs


def wrap(
    plan_: Plan | None, sig: Signature, kernels: dict[str, Callable], out_shapes: Callable
) -> dict[str, Callable]:
    """The op's device kernels, each padding as `plan_` says (unchanged when None)."""
    if plan_ is None:
        return kernels
    return {key: PaddedKernel(plan_, sig, k, out_shapes) for key, k in kernels.items()}


__all__ = [
    "Bucketing",
    "BucketOverflowError",
    "BucketsOf",
    "MultipleOf",
    "PowersOfTwo",
    "bucket_rows",
    "bucket_size",
    "buckets_of",
    "multiple_of",
    "powers_of_two",
    "sublane_tile",
]
