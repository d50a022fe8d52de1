"""Sharding strategies derived from what a Pallas kernel shows (`sharding="derived"`).

`derive(op, args, kwargs)` traces the op's JAX body at one call's shapes (no data)
and follows every dimension of every tensor argument through the jaxpr, to the
op's outputs:

- a `pallas_call` keeps a dimension independent when a grid axis marked "parallel"
  walks it block by block (its index map's block index along that dim is the grid
  index itself) in every operand that moves along that axis, every output moves
  along it too, and the kernel body never reads that axis's position
  (`pl.program_id`, `pl.num_programs`). A dim that some block spans whole, that an
  "arbitrary" axis walks, or that two axes walk, is not independent;
- reshapes that merge or split dims, transposes, broadcasts, elementwise
  arithmetic and high-end padding sliced back off carry a dim along (merged dims
  all stay independent, as rows are, whatever their leading dims);
- `reduce_sum` over an independent dim (or over the per-block partial results a
  kernel writes along a parallel axis, as rmsnorm's backward does for the weight
  gradient) makes a sum over the shards: the output is `Partial()`, as long as
  only linear steps follow. Any other reduction over it (max, a product, a
  cumulative sum) makes it dependent;
- `dot_general`'s batch and free dims stay independent, its contracting dims give
  `Partial()`;
- anything else (gather, sort, loops, a Helion kernel's traced form, an operand
  the kernel copies by hand from HBM) is not analysed: every dim it touches is
  *undecided*.

Each input dim starts with its own label; following the jaxpr ties labels that
must be sharded together (x's rows and the output's rows) and marks labels
dependent or undecided, with the reason. Every surviving group of tied labels is
one strategy: its inputs `Shard(d)` (Replicate where they have none of it), its
outputs `Shard(d)` or `Partial()`.

A derivation is a claim read off the kernel's structure: a body that mixes rows
inside one block, or padding that is not neutral, passes the analysis and is
caught only by the simulation (`tpu_kernels.sharding.simulate`), which every derived
rule passes before DTensor sees it (`tpu_kernels.sharding.Derived`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tpu_kernels.definition.signature import Kind
from tpu_kernels.lowering import pallas_grid

if TYPE_CHECKING:
    from tpu_kernels.definition.protocol import Op

DEPENDENT, UNDECIDED = "dependent", "undecided"


# ---- what the analysis tracks per dimension ------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Factor:
    """One piece of a dimension (a dim merged from several by a reshape has several, outer
    to inner). `labels`: the input dims it carries; `uniform`: the values do not vary
    along it (a broadcast); `coarse`: one entry per block of a walked dim (a kernel's
    per-block partial results), meaningful only once summed over."""

    size: int
    labels: frozenset[int] = frozenset()
    uniform: bool = False
    coarse: bool = False

    @property
    def opaque(self) -> bool:
        """Varies along the dim in a way no input dim's sharding follows (an iota, a constant)."""
        return not self.labels and not self.uniform


@dataclasses.dataclass(frozen=True)
class Dim:
    size: int
    factors: tuple[Factor, ...]  # size-1 pieces left out; product == size unless padded
    padded: bool = False  # padded at the high end (jnp.pad before a kernel), to be sliced back

    @property
    def labels(self) -> frozenset[int]:
        return frozenset().union(*(f.labels for f in self.factors)) if self.factors else frozenset()

    @property
    def uniform(self) -> bool:
        return all(f.uniform for f in self.factors)

    @property
    def structure(self) -> tuple:
        return tuple(f.size for f in self.factors), self.padded


def _opaque(size: int) -> Dim:
    return Dim(size, (Factor(size),) if size > 1 else ())


def _uniform(size: int) -> Dim:
    return Dim(size, (Factor(size, uniform=True),) if size > 1 else ())


@dataclasses.dataclass(frozen=True)
class Val:
    dims: tuple[Dim, ...]
    partial: frozenset[int] = frozenset()  # summing over the shards of these labels gives the value

    @property
    def labels(self) -> frozenset[int]:
        out = set(self.partial)
        for d in self.dims:
            out |= d.labels
        return frozenset(out)


def _opaque_val(shape: Sequence[int]) -> Val:
    return Val(tuple(_opaque(int(s)) for s in shape))


# ---- the result ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Note:
    """Why one input dim is not shardable: `kind` is DEPENDENT (the kernel reads across
    it) or UNDECIDED (the analysis could not follow it)."""

    tensor: str
    dim: int
    kind: str
    reason: str

    def __str__(self) -> str:
        return f"{self.tensor} dim {self.dim}: {self.kind}, {self.reason}"


@dataclasses.dataclass(frozen=True)
class Derivation:
    """One call's derived strategies: `strategies` as (output placements, {tensor
    parameter: placement}), the all-Replicate one first; `notes` for each input dim
    left out."""

    op: str
    strategies: list[tuple[list[Any], dict[str, Any]]]
    notes: list[Note]

    @property
    def undecided(self) -> list[Note]:
        return [n for n in self.notes if n.kind == UNDECIDED]


# ---- labels --------------------------------------------------------------------------------------


class _Labels:
    """Union-find over input dims, with the first reason each group stopped being shardable."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}
        self.dead: dict[int, tuple[str, str]] = {}
        self.where: dict[int, tuple[str, int]] = {}

    def new(self, tensor: str, dim: int) -> int:
        label = len(self.parent)
        self.parent[label] = label
        self.where[label] = (tensor, dim)
        return label

    def find(self, label: int) -> int:
        while self.parent[label] != label:
            self.parent[label] = self.parent[self.parent[label]]
            label = self.parent[label]
        return label

    def tie(self, labels: Iterable[int]) -> None:
        roots = sorted({self.find(x) for x in labels})
        if len(roots) < 2:
            return
        first = roots[0]
        reason = next((self.dead[r] for r in roots if r in self.dead), None)
        for r in roots[1:]:
            self.parent[r] = first
            self.dead.pop(r, None)
        if reason is not None:
            self.dead[first] = reason

    def kill(self, labels: Iterable[int], kind: str, reason: str) -> None:
        for x in labels:
            self.dead.setdefault(self.find(x), (kind, reason))

    def reason(self, label: int) -> tuple[str, str] | None:
        return self.dead.get(self.find(label))


# ---- the interpreter -----------------------------------------------------------------------------

_ELEMENTWISE = frozenset(
    """abs acos acosh add add_any and asin asinh atan atan2 atanh cbrt ceil clamp clz conj
    convert_element_type copy copy_p cos cosh digamma div eq erf erf_inv erfc exp exp2 expm1
    floor ge gt igamma imag integer_pow is_finite le lgamma log log1p logistic lt max min mul
    ne neg nextafter not or polygamma population_count pow real reduce_precision rem round
    rsqrt select_n shift_left shift_right_arithmetic shift_right_logical sign sin sinh sqrt
    square stop_gradient sub tan tanh xor zeta sharding_constraint""".split()
)
_LINEAR_UNARY = frozenset(
    "neg convert_element_type copy copy_p reduce_precision real imag conj sharding_constraint".split()
)
_ADDITIVE = frozenset(("add", "sub", "add_any"))
_NONLINEAR_REDUCTIONS = frozenset(
    ("reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or", "reduce_xor", "argmax", "argmin")
)
_CUMULATIVE = frozenset(("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"))
_CALLS = {  # primitives that run a sub-jaxpr on their own operands, and where it is held
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "remat": "jaxpr",
    "checkpoint": "jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
}


class _Analysis:
    def __init__(self, op: str) -> None:
        self.op = op
        self.labels = _Labels()

    # -- helpers ---------------------------------------------------------------------------
    def kill_val(self, v: Val, kind: str, reason: str) -> None:
        self.labels.kill(v.labels, kind, reason)

    def kill_dim(self, d: Dim, kind: str, reason: str) -> None:
        self.labels.kill(d.labels, kind, reason)

    def combine(self, dims: list[Dim], what: str) -> Dim:
        """Dims that must line up element for element (operands of one elementwise step,
        operands one grid axis walks together): their labels tie, piece by piece."""
        size = dims[0].size
        varying = [d for d in dims if not d.uniform]
        if not varying:
            return _uniform(size)
        shapes = {d.structure for d in varying}
        if len(shapes) > 1:
            for d in varying:
                self.kill_dim(d, UNDECIDED, f"{what} lines up dims split differently by reshapes")
            return _opaque(size)
        base = varying[0]
        factors = []
        for i, f in enumerate(base.factors):
            parts = [d.factors[i] for d in varying]
            if len({p.coarse for p in parts}) > 1:
                for p in parts:
                    self.labels.kill(p.labels, UNDECIDED, f"{what} mixes per-block results with a dim")
                factors.append(Factor(f.size))
                continue
            labels = frozenset().union(*(p.labels for p in parts))
            if any(p.opaque for p in parts) and labels:
                self.labels.kill(labels, DEPENDENT, f"{what} combines it with a value not sharded alike")
            else:
                self.labels.tie(labels)
            uniform = all(p.uniform for p in parts)
            factors.append(Factor(f.size, labels, uniform=uniform, coarse=parts[0].coarse))
        return Dim(size, tuple(factors), base.padded)

    # -- the walk --------------------------------------------------------------------------
    def run(self, jaxpr: Any, consts: Sequence[Any], ins: Sequence[Val]) -> list[Val]:
        env: dict[Any, Val] = {}
        for v, c in zip(jaxpr.constvars, consts):
            env[v] = _opaque_val(getattr(c, "shape", ()))
        for v, val in zip(jaxpr.invars, ins):
            env[v] = val

        def read(atom: Any) -> Val:
            if hasattr(atom, "val"):  # a literal
                return _opaque_val(getattr(atom.aval, "shape", ()))
            return env[atom]

        for eqn in jaxpr.eqns:
            vals = [read(a) for a in eqn.invars]
            outs = self.step(eqn, vals)
            for v, o in zip(eqn.outvars, outs):
                env[v] = o
        return [read(v) for v in jaxpr.outvars]

    def step(self, eqn: Any, ins: list[Val]) -> list[Val]:
        name = eqn.primitive.name
        shapes = [tuple(int(s) for s in getattr(v.aval, "shape", ())) for v in eqn.outvars]
        if name in _ELEMENTWISE:
            return [self.elementwise(name, ins, shapes[0])]
        handler = getattr(self, f"p_{name}", None)
        if handler is not None:
            return handler(eqn, ins, shapes)
        if name in _CALLS:
            return self.call(eqn, ins, shapes, eqn.params.get(_CALLS[name]))
        if name in _NONLINEAR_REDUCTIONS:
            return [self.reduce(ins[0], tuple(eqn.params["axes"]), linear=False, what=name)]
        if name in _CUMULATIVE:
            return [self.cumulative(ins[0], int(eqn.params["axis"]), name)]
        return self.unknown(name, ins, shapes)

    def unknown(self, name: str, ins: list[Val], shapes: list[tuple]) -> list[Val]:
        for v in ins:
            self.kill_val(v, UNDECIDED, f"it reaches `{name}`, which the derivation does not analyse")
        return [_opaque_val(s) for s in shapes]

    def call(self, eqn: Any, ins: list[Val], shapes: list[tuple], closed: Any) -> list[Val]:
        jaxpr = getattr(closed, "jaxpr", closed)
        if jaxpr is None or not hasattr(jaxpr, "eqns") or len(jaxpr.invars) != len(ins):
            return self.unknown(eqn.primitive.name, ins, shapes)
        return self.run(jaxpr, getattr(closed, "consts", ()), ins)

    # -- elementwise ---------------------------------------------------------------------------
    def elementwise(self, name: str, ins: list[Val], shape: tuple) -> Val:
        arrays = [v for v in ins if v.dims]
        dims = tuple(
            self.combine([v.dims[i] for v in arrays], f"`{name}`") if arrays else _opaque(s)
            for i, s in enumerate(shape)
        )
        partial = self.partial_through(name, ins)
        return Val(dims, partial)

    def partial_through(self, name: str, ins: list[Val]) -> frozenset[int]:
        """The partial labels an elementwise step keeps (a linear step), killing the rest."""
        partials = [v.partial for v in ins if v.partial]
        if not partials:
            return frozenset()
        keep: frozenset[int] = frozenset()
        if name in _LINEAR_UNARY:
            keep = partials[0]
        elif name in _ADDITIVE and all(v.partial == partials[0] for v in ins):
            keep = partials[0]  # a sum of sums over the shards
        elif name in ("mul", "div") and len(partials) == 1:
            scaled = ins[0] if name == "div" else next(v for v in ins if v.partial)
            others = [v for v in ins if v is not scaled]
            if scaled.partial and all(not v.labels for v in others):
                keep = scaled.partial  # scaled by a value every shard holds whole
        lost = frozenset().union(*partials) - keep
        if lost:
            self.labels.kill(lost, DEPENDENT, f"a sum over it goes through `{name}`, which is not linear")
        return keep

    # -- structure ---------------------------------------------------------------------------
    def p_broadcast_in_dim(self, eqn: Any, ins: list[Val], shapes: list[tuple]) -> list[Val]:
        (shape,), src = shapes, ins[0]
        mapped = dict(zip(eqn.params["broadcast_dimensions"], range(len(src.dims))))
        dims = []
        for j, size in enumerate(shape):
            i = mapped.get(j)
            if i is not None and src.dims[i].size == size:
                dims.append(src.dims[i])
            else:
                dims.append(_uniform(size))
        return [Val(tuple(dims), src.partial)]

    def p_reshape(self, eqn: Any, ins: list[Val], shapes: list[tuple]) -> list[Val]:
        if eqn.params.get("dimensions") is not None:
            return self.unknown("reshape with dimensions", ins, shapes)
        return [self.reshape(ins[0], shapes[0])]

    def reshape(self, src: Val, shape: tuple) -> Val:
        if tuple(d.size for d in src.dims) == tuple(shape):
            return src
        queue: list[Factor] = []
        for d in src.dims:
            if d.padded:  # its pieces no longer multiply to its size
                self.kill_dim(d, UNDECIDED, "a padded dim is reshaped")
                queue.append(Factor(d.size))
            else:
                queue += list(d.factors)
        dims = []
        for size in shape:
            taken: list[Factor] = []
            product = 1
            while product < size and queue:
                f = queue.pop(0)
                if size % (product * f.size) == 0:
                    taken.append(f)
                    product *= f.size
                elif size % product == 0 and f.size % (size // product) == 0:
                    # the piece is split across two dims: its contiguous shards no longer
                    # line up with either part
                    outer = size // product
                    self.labels.kill(f.labels, DEPENDENT, "a reshape splits it across dims")
                    taken.append(Factor(outer, uniform=f.uniform))
                    queue.insert(0, Factor(f.size // outer, uniform=f.uniform))
                    product = size
                else:
                    rest = frozenset().union(f.labels, *(g.labels for g in queue))
                    self.labels.kill(rest, UNDECIDED, "a reshape the derivation cannot follow")
                    queue = []
                    break
            if product != size:  # not followed: opaque from here on
                taken, queue = [Factor(size)], []
            dims.append(Dim(size, tuple(taken) if size > 1 else ()))
        return Val(tuple(dims), src.partial)

    def p_squeeze(self, eqn: Any, ins: list[Val], shapes: list[tuple]) -> list[Val]:
        drop = {d % max(len(ins[0].dims), 1) for d in eqn.params["dimensions"]}
        return [Val(tuple(d for i, d in enumerate(ins[0].dims) if i not in drop), ins[0].partial)]

    def p_transpose(self, eqn: Any, ins: list[Val], shapes: list[tuple]) -> list[Val]:
        src = ins[0]
        return [Val(tuple(src.dims[i] for i in eqn.params["permutation"]), src.partial)]

    def p_iota(self, eqn: Any, ins: list[Val], shapes: list[tuple]) -> list[Val]:
        (shape,) = shapes
        along = int(eqn.params["dimension"])
        return [Val(tuple(_opaque(s) if i == along else _uniform(s) for i, s in enumerate(shape)))]

    def p_slice(self, eqn: Any, ins: list[Val], shapes: list[tuple]) -> list[Val]:
        src, (shape,) = ins[0], shapes
        strides = eqn.params.get("strides") or (1,) * len(shape)
        dims = []
        for d, start, limit, stride, size in zip(
            src.dims, eqn.params["start_indices"], eqn.params["limit_indices"], strides, shape
        ):
            product = math.prod(f.size for f in d.factors)
            if start == 0 and stride == 1 and limit == d.size and not d.padded:
                dims.append(d)
            elif d.padded and start == 0 and stride == 1 and limit == product:
                dims.append(Dim(size, d.factors))  # the padding sliced back off
            else:
                self.kill_dim(d, DEPENDENT, "a slice takes part of it")
                dims.append(_uniform(size) if d.uniform else _opaque(size))
        return [Val(tuple(dims), src.partial)]

    def p_pad(self, eqn: Any, ins: list[Val], shapes: list[tuple]) -> list[Val]:
        src, (shape,) = ins[0], shapes
        self.kill_val(ins[1], DEPENDENT, "it is a padding value")
        dims = []
        for d, (lo, hi, interior), size in zip(src.dims, eqn.params["padding_config"], shape):
            if (lo, hi, interior) == (0, 0, 0):
                dims.append(d)
            elif lo == 0 and interior == 0 and hi > 0 and not d.padded:
                dims.append(Dim(size, d.factors, padded=True))  # each shard pads its own
            else:
                self.kill_dim(d, UNDECIDED, "padded other than at its end")
                dims.append(_opaque(size))
        if src.partial:
            self.labels.kill(src.partial, DEPENDENT, "a sum over it is padded")
        return [Val(tuple(dims))]

    def p_concatenate(self, eqn: Any, ins: list[Val], shapes: list[tuple]) -> list[Val]:
        (shape,), along = shapes, int(eqn.params["dimension"])
        for v in ins:
            self.kill_dim(v.dims[along], DEPENDENT, "arrays are concatenated along it")
        dims = tuple(
            _opaque(s) if i == along else self.combine([v.dims[i] for v in ins], "`concatenate`")
            for i, s in enumerate(shape)
        )
        return [Val(dims, self.partial_through("add", ins))]

    def p_rev(self, eqn: Any, ins: list[Val], shapes: list[tuple]) -> list[Val]:
        src = ins[0]
        dims = list(src.dims)
        for i in eqn.params["dimensions"]:
            self.kill_dim(dims[i], DEPENDENT, "it is reversed")
            dims[i] = _opaque(dims[i].size)
        return [Val(tuple(dims), src.partial)]

    # -- reductions ----------------------------------------------------------------------------
    def p_reduce_sum(self, eqn: Any, ins: list[Val], shapes: list[tuple]) -> list[Val]:
        return [self.reduce(ins[0], tuple(eqn.params["axes"]), linear=True, what="reduce_sum")]

    def reduce(self, src: Val, axes: tuple[int, ...], *, linear: bool, what: str) -> Val:
        partial = set(src.partial)
        if src.partial and not linear:
            self.labels.kill(src.partial, DEPENDENT, f"a sum over it goes through `{what}`")
            partial = set()
        for a in axes:
            d = src.dims[a]
            if linear:
                partial |= d.labels  # summing each shard's part, then the parts: the whole sum
            else:
                self.kill_dim(d, DEPENDENT, f"`{what}` reduces over it")
        dims = tuple(d for i, d in enumerate(src.dims) if i not in axes)
        return Val(dims, frozenset(partial))

    def cumulative(self, src: Val, axis: int, what: str) -> Val:
        self.kill_dim(src.dims[axis], DEPENDENT, f"`{what}` runs along it")
        self.labels.kill(src.partial, DEPENDENT, f"a sum over it goes through `{what}`")
        dims = list(src.dims)
        dims[axis] = _opaque(dims[axis].size)
        return Val(tuple(dims))

    def p_dot_general(self, eqn: Any, ins: list[Val], shapes: list[tuple]) -> list[Val]:
        lhs, rhs = ins[0], ins[1]
        (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
        if lhs.partial or rhs.partial:
            self.labels.kill(lhs.partial | rhs.partial, DEPENDENT, "a sum over it is multiplied")
        batch = [
            self.combine([lhs.dims[i], rhs.dims[j]], "`dot_general`'s batch dims") for i, j in zip(lb, rb)
        ]
        partial: set[int] = set()
        for i, j in zip(lc, rc):
            contracted = [lhs.dims[i], rhs.dims[j]]
            if any(d.padded or any(f.coarse for f in d.factors) for d in contracted):
                for d in contracted:
                    self.kill_dim(d, UNDECIDED, "a padded or per-block dim is contracted")
                continue
            merged = self.combine(contracted, "`dot_general`'s contraction")
            partial |= merged.labels
        free_l = [d for i, d in enumerate(lhs.dims) if i not in lc and i not in lb]
        free_r = [d for i, d in enumerate(rhs.dims) if i not in rc and i not in rb]
        return [Val(tuple(batch + free_l + free_r), frozenset(partial))]

    # -- pallas_call ---------------------------------------------------------------------------
    def p_pallas_call(self, eqn: Any, ins: list[Val], shapes: list[tuple]) -> list[Val]:
        gm = eqn.params["grid_mapping"]
        where = f"the kernel {pallas_grid.kernel_name(eqn)}"

        def give_up(reason: str) -> list[Val]:
            for v in ins:
                self.kill_val(v, UNDECIDED, f"{where} {reason}")
            return [_opaque_val(s) for s in shapes]

        if gm.num_index_operands or gm.num_dynamic_grid_bounds:
            return give_up("has index maps that read scalar-prefetch operands, or a dynamic grid")
        if eqn.params.get("input_output_aliases"):
            return give_up("aliases an output to an input")
        operands = ins[gm.num_index_operands :]
        n_in = gm.num_inputs
        grid = tuple(int(g) for g in gm.grid)
        sems = pallas_grid.semantics(eqn)
        read_position = pallas_grid.position_axes(eqn)
        walked: list[dict[int, int]] = []  # per operand: {grid axis: the array dim it walks}
        blocks: list[tuple[int, ...]] = []
        for k, bm in enumerate(gm.block_mappings):
            what = f"input {k}" if k < n_in else f"output {k - n_in}"
            dims = pallas_grid.block_dims(bm)
            space = str(getattr(bm.block_aval, "memory_space", "")).lower()
            if dims is None or pallas_grid.in_hbm(bm) or "semaphore" in space:
                return give_up(f"has {what} in HBM or with element-offset blocks (copied by hand)")
            shape = tuple(int(s) for s in bm.array_aval.shape)
            block = dims[0]
            blocks.append(block)
            found, reasons = self.walks(bm, shape, block, grid, sems, read_position)
            walked.append(found)
            if k < n_in:
                for d, reason in reasons.items():
                    self.kill_dim(operands[k].dims[d], DEPENDENT, f"{where}: {reason} ({what} dim {d})")
        for k in range(n_in):
            if operands[k].partial:
                self.labels.kill(operands[k].partial, DEPENDENT, f"a sum over it enters {where}")
        outputs = walked[n_in:]
        structures: dict[int, tuple[Dim, int]] = {}
        for a in sorted({a for w in walked[:n_in] for a in w}):
            members = [(k, walked[k][a]) for k in range(n_in) if a in walked[k]]
            dims = [operands[k].dims[d] for k, d in members]
            sizes = {blocks[k][d] for k, d in members}
            still = [j for j, w in enumerate(outputs) if a not in w]
            if still:
                for d in dims:
                    self.kill_dim(
                        d,
                        DEPENDENT,
                        f"{where}: output {still[0]} does not move along grid axis {a} (accumulated)",
                    )
                continue
            if len(sizes) > 1:
                for d in dims:
                    self.kill_dim(d, UNDECIDED, f"{where}: grid axis {a} walks blocks of different sizes")
                continue
            structures[a] = (self.combine(dims, f"{where}'s grid axis {a}"), sizes.pop())
        outs = []
        for j, shape in enumerate(shapes):
            k = n_in + j
            out_dims = []
            for d, size in enumerate(shape):
                a = next((a for a, dd in walked[k].items() if dd == d), None)
                if a is None or a not in structures:
                    out_dims.append(_opaque(size))
                    continue
                s, block = structures[a]
                if size == s.size and blocks[k][d] == block:
                    out_dims.append(s)
                elif blocks[k][d] == 1 and size == grid[a] and s.labels:  # one result per block
                    out_dims.append(Dim(size, (Factor(size, s.labels, coarse=True),)))
                else:
                    self.kill_dim(s, UNDECIDED, f"{where}: output {j} dim {d} is walked unlike its inputs")
                    out_dims.append(_opaque(size))
            outs.append(Val(tuple(out_dims)))
        return outs

    def walks(
        self,
        bm: Any,
        shape: tuple[int, ...],
        block: tuple[int, ...],
        grid: tuple[int, ...],
        sems: tuple[str, ...],
        read_position: set[int],
    ) -> tuple[dict[int, int], dict[int, str]]:
        """Which array dim each valid parallel grid axis walks block by block in one operand,
        and why each other dim is not walked so."""
        dependence = pallas_grid.axis_dependence(bm, len(grid))
        found: dict[int, int] = {}
        reasons: dict[int, str] = {}
        twice: set[int] = set()
        for d, axes in enumerate(dependence):
            if not axes:
                reasons[d] = (
                    "a block spans it whole" if block[d] >= shape[d] else "the kernel reads one block of it"
                )
                continue
            if len(axes) > 1:
                reasons[d] = f"grid axes {sorted(axes)} walk it together"
                continue
            (a,) = axes
            if sems[a] not in pallas_grid.PARALLEL_KINDS:
                reasons[d] = f"the {sems[a]!r} grid axis {a} walks it"
            elif a in read_position:
                reasons[d] = (
                    f"the kernel body reads grid axis {a}'s position (pl.program_id / pl.num_programs)"
                )
            elif a in found or a in twice:
                reasons[d] = f"grid axis {a} walks another dim of the operand too"
                if a in found:
                    reasons[found.pop(a)] = f"grid axis {a} walks another dim of the operand too"
                twice.add(a)
            elif not _identity(bm, a, d, len(grid)):
                reasons[d] = f"its block index is not grid axis {a}'s index itself"
            elif grid[a] != -(-shape[d] // block[d]):
                reasons[d] = f"grid axis {a} has {grid[a]} steps for its {-(-shape[d] // block[d])} blocks"
            else:
                found[a] = d
        return found, reasons


def _identity(bm: Any, axis: int, dim: int, n_grid: int) -> bool:
    """The block index along `dim` is grid axis `axis`'s index (at a few points, past the
    grid too: an index map is arithmetic on the indices)."""
    for t in (0, 1, 2, 3, 7):
        point = [0] * n_grid
        point[axis] = t
        if pallas_grid.block_index(bm, tuple(point))[dim] != t:
            return False
    return True


# ---- one call -------------------------------------------------------------------------------------


def derive(op: Op, args: tuple, kwargs: dict) -> Derivation:
    """The strategies `op`'s kernel shows at this call (tensors: anything with a shape and
    a dtype: torch tensors, jax.ShapeDtypeStructs, DTensorSpecs' metadata)."""
    import jax
    from torch.distributed.tensor import Partial, Replicate, Shard

    from tpu_kernels.definition import dtypes

    sig = op.signature
    values = sig.values(args, kwargs)
    analysis = _Analysis(op.name)
    tensors: list[tuple[str, Any]] = []
    statics: dict[str, Any] = {}
    ins: list[Val] = []
    for p, v in zip(sig.params, values):
        if not p.is_tensor:
            statics[p.name] = v
            continue
        if v is None:
            statics[p.name] = None
            continue
        if p.kind not in (Kind.TENSOR, Kind.OPTIONAL_TENSOR):
            raise NotImplementedError(f"{op.name}: sharding='derived' does not take list[Tensor] parameters.")
        spec = _spec(op, p.name, v)
        tensors.append((p.name, spec))
        dims = []  # dims of size 0 and 1 carry no label: nothing to shard
        for d, size in enumerate(spec.shape):
            label = frozenset({analysis.labels.new(p.name, d)}) if size > 1 else None
            dims.append(Dim(size, (Factor(size, label),)) if label else Dim(size, ()))
        ins.append(Val(tuple(dims)))
    names = [n for n, _ in tensors]

    def body(*arrays: Any) -> Any:
        return op.fn(**statics, **dict(zip(names, arrays)))

    specs = [s for _, s in tensors]
    with jax.enable_x64(True) if dtypes.needs_x64(specs, statics) else contextlib.nullcontext():
        closed = jax.make_jaxpr(body)(*specs)
    outs = analysis.run(closed.jaxpr, closed.consts, ins)
    for j, v in enumerate(outs):
        for d, dim in enumerate(v.dims):
            if dim.padded or any(f.coarse for f in dim.factors):
                analysis.kill_dim(
                    dim, UNDECIDED, f"output {j} dim {d} keeps a kernel's padding or per-block results"
                )
    strategies: list[tuple[list[Any], dict[str, Any]]] = [([Replicate()] * len(outs), {})]
    notes: list[Note] = []
    labels = analysis.labels
    groups: dict[int, list[int]] = {}
    for label in labels.parent:
        groups.setdefault(labels.find(label), []).append(label)
    for root, members in sorted(groups.items()):
        dead = labels.reason(root)
        placed: dict[str, Any] = {}
        for label in members:
            tensor, dim = labels.where[label]
            if tensor in placed and dead is None:
                dead = (DEPENDENT, f"it would shard {tensor} on two dims at once")
            placed[tensor] = Shard(dim)
        out_placements: list[Any] = []
        for j, v in enumerate(outs):
            hit = [d for d, dim in enumerate(v.dims) if any(labels.find(x) == root for x in dim.labels)]
            partial = any(labels.find(x) == root for x in v.partial)
            if dead is None and (len(hit) > 1 or (hit and partial)):
                dead = (DEPENDENT, f"output {j} would be sharded twice")
            if dead is None and hit and len(v.dims[hit[0]].factors) != 1:
                dead = (DEPENDENT, f"output {j} dim {hit[0]} merges it with other dims")
            out_placements.append(Shard(hit[0]) if hit else Partial() if partial else Replicate())
        if dead is None and all(isinstance(p, Replicate) for p in out_placements):
            # its values reach no output (unused, or only its shape is): sharding it shards nothing
            dead = (DEPENDENT, "it reaches no output")
        if dead is not None:
            notes += [Note(*labels.where[x], *dead) for x in sorted(members)]
            continue
        strategies.append((out_placements, placed))
    return Derivation(op.name, strategies, sorted(notes, key=lambda n: (names.index(n.tensor), n.dim)))


def _spec(op: Op, name: str, v: Any) -> Any:
    """A tensor, a DTensorSpec or a jax.ShapeDtypeStruct as the ShapeDtypeStruct to trace with."""
    import jax

    from tpu_kernels.definition import dtypes

    meta = getattr(v, "tensor_meta", None)
    if meta is not None:  # a DTensorSpec: the global shape
        return jax.ShapeDtypeStruct(tuple(meta.shape), dtypes.to_jax(op.name, name, meta.dtype))
    return dtypes.spec(op.name, name, v)


__all__ = ["DEPENDENT", "UNDECIDED", "Derivation", "Note", "derive"]
