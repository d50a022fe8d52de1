"""A gated MLP's down projection with its gate fused in: (silu(gate) * up) @ w, as Pallas TPU kernels.

A SwiGLU MLP (Llama, Qwen2, Mistral) computes (silu(x Wg) * (x Wu)) Wd. Unfused, silu(g) * u is
a pass over [tokens, ffn] arrays between the matmuls: it reads g and u, writes h, and the down
matmul reads h again; its gradient is a second pass (dg and du from dh, g and u). Here the gate
is a prologue of the matmul's a tiles and its gradient an epilogue of the dh product, so neither
pass goes through HBM:

    forward   out = h @ w, each (bm, bk) tile of h = silu(g) * u made in VMEM from g's and u's
    backward  dh = d_out @ w.T, and at its last step dg = dh * u * silu'(g), du = dh * silu(g)
              dw = h.T @ d_out, h's tiles made again from g's and u's, read transposed

The prologue kernels make their a tile a slice of the contraction at a time (`SLICE`), each
slice's gate then its share of the dot, so the gate's float32 temporaries are a slice's.

silu and its derivative run in float32. h is rounded to the operands' dtype before the MXU, as
the unfused computation rounds it when it stores h; dh is not rounded before the epilogue (the
unfused backward stores it in the operands' dtype first).

The grids, edge blocks and K tails are matmul's (pallas.py): a block that does not divide a
dimension leaves a partial edge block, and the contraction's tail is masked to zeros in both
operands, after the prologue (a NaN the prologue makes of what an edge buffer held stays out).
Blocks left unset take `blocks.choose` at the product's shape, among the candidates whose VMEM
need counts the second operand, the prologue's or epilogue's float32 temporaries and the second
output (`need`), priced with the gate's own cost where a prologue makes it (`GATE`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import export
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels.kernels import _vmem
from tpu_kernels.kernels._blocks import LANES, SUBLANES, cost, is_empty, require_float
from tpu_kernels.kernels.matmul import blocks
from tpu_kernels.kernels.matmul.pallas import _block, mxu_passes
from tpu_kernels.runtime import mosaic_precision

OP = "swiglu_matmul"

GATE = blocks.Prologue(a_operands=2, element_s=0.7e-12)
"""The gate's price in a prologue kernel's blocks (the forward's, the weight gradient's): g's and
u's blocks both stream each step, and the gate's vector work on each element of the a tile
precedes the step's dot; both are paid again for every block along N, so a block_n narrower
than N costs them twice or more. element_s is fitted to the chip's sweep of the gated forward
(bench/reports/chip_v5e_blocks_probe.json, `gated`)."""


def _sigmoid(x: jax.Array) -> jax.Array:
    """(1 + tanh(x / 2)) / 2: one transcendental and no division, where 1 / (1 + exp(-x)) costs
    the vector unit a division on every element (the gate's share of a step: the chip's
    record, bench/reports/chip_v5e_gated_probe.json). Within float32's rounding of 1 of the
    logistic; below about -17, where the logistic is under that, it reads 0."""
    return 0.5 * (1.0 + jnp.tanh(0.5 * x))


def _gate(g: jax.Array, u: jax.Array) -> jax.Array:
    """silu(g) * u = (g / 2) (1 + tanh(g / 2)) u in float32, rounded to g's dtype: the a operand
    the MXU takes."""
    x = 0.5 * g.astype(jnp.float32)
    return (x * (1.0 + jnp.tanh(x)) * u.astype(jnp.float32)).astype(g.dtype)


def _masked(x: jax.Array, dim: int, valid: int) -> jax.Array:
    """x with its entries at index >= `valid` along `dim` set to zero (a select, not a product)."""
    return jnp.where(jax.lax.broadcasted_iota(jnp.int32, x.shape, dim) < valid, x, jnp.zeros_like(x))


SLICE = 256
"""A prologue kernel makes its a tile in slices of this many entries along the contraction (where
they divide the block), each slice's gate followed by its share of the dot: the gate's float32
temporaries are a slice's, not the whole tile's, so wider blocks fit (at qwen2.5-1.5b's down
projection, (512, 1536, 1792) in slices ran with XLA's dot, where the unsliced kernel's VMEM
need refused those blocks: bench/reports/chip_v5e_blocks_probe.json, `k_chunk256`)."""


def _slice(bk: int) -> int:
    """The slice a prologue kernel makes its a tile in, along a contraction block of `bk`."""
    return SLICE if bk % SLICE == 0 else bk


def _steps(acc_ref, load, *, n_k: int, k_tail: int, contract: tuple[int, int], bk: int, size: int,
           c_ref=None) -> None:
    """Zero `acc_ref` (or set it to `c_ref`'s block) at the first k step and add this step's
    product of the operands `load(start, size)` gives for each slice of the contraction block
    (`bk` entries in slices of `size`), their last K block's tail masked where bk does not divide
    K (`k_tail` valid entries)."""
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref) if c_ref is None else c_ref[...].astype(acc_ref.dtype)

    def accumulate(tail: int):
        total = None
        for start in range(0, bk, size):
            valid = size if not tail else min(size, tail - start)
            if valid <= 0:  # past K: a slice of the tail's block with nothing in it
                break
            a, b = load(start, size)
            if valid < size:
                a, b = _masked(a, contract[0], valid), _masked(b, contract[1], valid)
            part = mosaic_precision.dot(a, b, preferred_element_type=acc_ref.dtype, contract=contract)
            total = part if total is None else total + part
        acc_ref[...] += total

    if k_tail:

        @pl.when(k < n_k - 1)
        def _whole():
            accumulate(0)

        @pl.when(k == n_k - 1)
        def _last():
            accumulate(k_tail)

    else:
        accumulate(0)


def _store(o_ref, scratch, n_k: int) -> None:
    """Write a scratch accumulator (a result that is not float32) to the output at the last k."""
    if scratch:

        @pl.when(pl.program_id(2) == n_k - 1)
        def _write():
            o_ref[...] = scratch[0][...].astype(o_ref.dtype)


def _forward_kernel(g_ref, u_ref, w_ref, *refs, n_k: int, k_tail: int, addend: bool = False):
    """out tile (i, j) += gate(g, u)[i, k] @ w[k, j], the a tile made a slice of k at a time;
    `addend`: refs start with c's block, which the sum starts from."""
    c_ref, (o_ref, *scratch) = (refs[0], refs[1:]) if addend else (None, refs)
    bk = g_ref.shape[1]

    def load(start: int, size: int):
        cols = slice(start, start + size)
        return _gate(g_ref[:, cols], u_ref[:, cols]), w_ref[cols, :]

    _steps(scratch[0] if scratch else o_ref, load, n_k=n_k, k_tail=k_tail, contract=(1, 0), bk=bk, size=_slice(bk),
           c_ref=c_ref)
    _store(o_ref, scratch, n_k)


def _dgrad_kernel(d_ref, w_ref, g_ref, u_ref, dg_ref, du_ref, acc_ref, *, n_k: int, k_tail: int):
    """dh tile (i, j) += d_out[i, k] @ w[j, k].T; at the last k, dg and du from dh, g and u."""
    bn = d_ref.shape[1]
    _steps(acc_ref, lambda start, size: (d_ref[...], w_ref[...]), n_k=n_k, k_tail=k_tail, contract=(1, 1),
           bk=bn, size=bn)

    @pl.when(pl.program_id(2) == n_k - 1)
    def _finish():
        dh = acc_ref[...]
        g, u = g_ref[...].astype(jnp.float32), u_ref[...].astype(jnp.float32)
        s = _sigmoid(g)
        du_ref[...] = (dh * g * s).astype(du_ref.dtype)
        dg_ref[...] = (dh * u * s * (1.0 + g * (1.0 - s))).astype(dg_ref.dtype)


def _wgrad_kernel(g_ref, u_ref, d_ref, o_ref, *scratch, n_k: int, k_tail: int):
    """dw tile (i, j) += gate(g, u)[k, i].T @ d_out[k, j]: g's and u's blocks read as stored, the a
    tile made a slice of k (rows of g's block) at a time."""
    bk = g_ref.shape[0]

    def load(start: int, size: int):
        rows = slice(start, start + size)
        return _gate(g_ref[rows, :], u_ref[rows, :]), d_ref[rows, :]

    _steps(scratch[0] if scratch else o_ref, load, n_k=n_k, k_tail=k_tail, contract=(0, 0), bk=bk, size=_slice(bk))
    _store(o_ref, scratch, n_k)


def _prologue_need(bm: int, bn: int, bk: int, itemsize: int, passes: int = 1) -> int:
    """A prologue kernel's grid step (forward; the weight gradient with its blocks renamed): matmul's,
    the second a operand's double-buffered block, the gate's float32 temporaries of a (bm,
    slice) piece of the a tile (the gate, its sigmoid, the product), and the float32 sum of the
    slices' products beside the dot's own."""
    rows, cols = _vmem.padded_rows, _vmem.padded_cols
    a = rows(bm, itemsize) * cols(bk)
    total = rows(bm, 4) * cols(bn) * 4 if _slice(bk) < bk else 0
    return (blocks.vmem_need(bm, bn, bk, itemsize, passes) + 2 * a * itemsize
            + 3 * rows(bm, 4) * cols(_slice(bk)) * 4 + total)


def _epilogue_need(bm: int, bn: int, bk: int, itemsize: int, passes: int = 1) -> int:
    """The data gradient's grid step, output tiles (bm, bn) over the contraction's bk: matmul's,
    the float32 accumulator even at float32 (the outputs are not the product), g's and u's
    double-buffered blocks, the second output's, and the epilogue's float32 temporaries."""
    rows, cols = _vmem.padded_rows, _vmem.padded_cols
    tile = rows(bm, itemsize) * cols(bn) * itemsize
    acc = rows(bm, 4) * cols(bn) * 4
    return (blocks.vmem_need(bm, bn, bk, itemsize, passes) + (acc if itemsize == 4 else 0)
            + 2 * 2 * tile + 2 * tile + 4 * acc)


def _blocks(m, k, n, dtype, given, names, multiples, need, prologue=blocks.PLAIN,
            op: str = OP) -> tuple[int, int, int, int]:
    """(bm, bn, bk, passes) of an [m, k] @ [k, n] product of this module's kernels: the blocks
    `given` (each a multiple of its `multiples` entry, capped at its dimension), else the
    default's under `need`, priced with `prologue`; refused when their VMEM need passes the cap."""
    itemsize, npass = jnp.dtype(dtype).itemsize, mxu_passes(dtype)
    if any(export.is_symbolic_dim(d) for d in (m, k, n)) or 0 in (m, k, n):
        default = blocks.default(m, k, n, itemsize, npass)
    else:
        b = blocks.choose(m, k, n, itemsize, npass, need, prologue)
        default = (b.m, b.n, b.k)
    bm, bn, bk = (_block(name, dim, block, d, mult)
                  for name, dim, block, d, mult in zip(names, (m, n, k), given, default, multiples, strict=True))
    total = need(bm, bn, bk, itemsize, npass)
    if not export.is_symbolic_dim(total) and not _vmem.fits(total):
        raise ValueError(
            f"{op}: blocks ({bm}, {bn}, {bk}) ({', '.join(names)}) need about {total / _vmem.MIB:.0f} MiB of "
            f"VMEM in {jnp.dtype(dtype)}, over the {_vmem.CAP // _vmem.MIB} MiB a shipped kernel may use; pass "
            "smaller blocks, or leave them unset for the call's defaults."
        )
    return bm, bn, bk, npass


def _check(gate: jax.Array, up: jax.Array, w: jax.Array, op: str = OP) -> None:
    if gate.ndim != 2 or w.ndim != 2 or gate.shape[1] != w.shape[0]:
        raise ValueError(f"{op}: expected gate [M, K] and w [K, N], got {gate.shape} and {w.shape}.")
    if up.shape != gate.shape:
        raise ValueError(f"{op}: expected up of gate's shape {gate.shape}, got {up.shape}.")
    require_float(op, gate=gate, up=up, w=w)
    if not gate.dtype == up.dtype == w.dtype:
        raise ValueError(f"{op}: gate, up and w must have one dtype, got {gate.dtype}, {up.dtype} and {w.dtype}.")


def _params(need: int):
    return _vmem.compiler_params(("parallel", "parallel", "arbitrary"), need)


def swiglu_matmul(
    gate: jax.Array,
    up: jax.Array,
    w: jax.Array,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
) -> jax.Array:
    """(silu(gate) * up) @ w for gate and up [M, K] and w [K, N]; the result has gate's dtype.
    Blocks as matmul's, over the product's (M, K, N)."""
    return _forward(gate, up, w, None, (block_m, block_n, block_k))


def swiglu_matmul_add(
    gate: jax.Array,
    up: jax.Array,
    w: jax.Array,
    c: jax.Array,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
) -> jax.Array:
    """(silu(gate) * up) @ w + c, c [M, N] of gate's dtype (the residual a decoder layer adds to
    its MLP's output): the sum starts from c's tile, as `pallas.matmul_add`'s. Its gradients are
    `swiglu_matmul_backward`'s and grad_out itself (c's)."""
    return _forward(gate, up, w, c, (block_m, block_n, block_k))


def _add_need(bm: int, bn: int, bk: int, itemsize: int, passes: int = 1) -> int:
    """`_prologue_need` and the addend's double-buffered block."""
    return _prologue_need(bm, bn, bk, itemsize, passes) + blocks.addend_need(bm, bn, itemsize)


def _forward(gate, up, w, c, given):
    name = OP if c is None else f"{OP}_add"
    _check(gate, up, w, name)
    (m, k), n = gate.shape, w.shape[1]
    if c is not None and (tuple(c.shape) != (m, n) or c.dtype != gate.dtype):
        raise ValueError(f"{name}: expected c [{m}, {n}] of gate's dtype {gate.dtype}, got {tuple(c.shape)} {c.dtype}.")
    need = _prologue_need if c is None else _add_need
    bm, bn, bk, npass = _blocks(m, k, n, gate.dtype, given, ("block_m", "block_n", "block_k"),
                                (SUBLANES, LANES, LANES), need, GATE, name)
    if is_empty(gate, w):  # an empty sum: zeros, or c
        return jnp.zeros((m, n), gate.dtype) if c is None else c
    itemsize = gate.dtype.itemsize
    grid = (pl.cdiv(m, bm), pl.cdiv(n, bn), pl.cdiv(k, bk))
    a_spec = pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk))
    o_spec = pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j))
    return pl.pallas_call(
        functools.partial(_forward_kernel, n_k=grid[2], k_tail=_tail(k, bk), addend=c is not None),
        out_shape=jax.ShapeDtypeStruct((m, n), gate.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            grid=grid,
            in_specs=[a_spec, a_spec, pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))] + ([] if c is None else [o_spec]),
            out_specs=o_spec,
            scratch_shapes=_acc_scratch(gate.dtype, bm, bn),
        ),
        compiler_params=_params(need(bm, bn, bk, itemsize, npass)),
        cost_estimate=cost(2 * m * n * k * npass, m * k * grid[1],
                           (2 * m * k + k * n + m * n * (1 if c is None else 2)) * itemsize),
    )(gate, up, w, *(() if c is None else (c,)))


def swiglu_matmul_backward(
    gate: jax.Array,
    up: jax.Array,
    w: jax.Array,
    grad_out: jax.Array,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(grad_gate, grad_up, grad_w) of out = (silu(gate) * up) @ w: two kernels. The first
    computes dh = grad_out @ w.T (w read transposed in place) and, at its last step, grad_gate
    and grad_up from dh, gate and up; the second grad_w = h.T @ grad_out with h's tiles made
    from gate's and up's, read transposed in place. The forward's blocks are kept along M, K and
    N where given, as matmul_backward keeps them."""
    _check(gate, up, w)
    (m, k), n = gate.shape, w.shape[1]
    if grad_out.shape != (m, n):
        raise ValueError(f"{OP}_backward: expected grad_out [{m}, {n}], got {grad_out.shape}.")
    dt = gate.dtype
    d = grad_out.astype(dt)
    # dh [M, K] = d [M, N] @ w[K, N].T: M rows, K columns, N summed
    am, ak, an, apass = _blocks(m, n, k, dt, (block_m, block_k, block_n), ("block_m", "block_k", "block_n"),
                                (SUBLANES, LANES, LANES), _epilogue_need)
    # dw [K, N] = h[M, K].T @ d [M, N]: K rows (along h's lanes), N columns, M summed
    wk, wn, wm, wpass = _blocks(k, m, n, dt, (block_k, block_n, block_m), ("block_k", "block_n", "block_m"),
                                (LANES, LANES, SUBLANES), _prologue_need, GATE)
    if is_empty(gate, w, d):
        return jnp.zeros((m, k), dt), jnp.zeros((m, k), dt), jnp.zeros((k, n), dt)
    itemsize = dt.itemsize
    grid = (pl.cdiv(m, am), pl.cdiv(k, ak), pl.cdiv(n, an))
    gu_spec = pl.BlockSpec((am, ak), lambda i, j, kk: (i, j))
    grad_gate, grad_up = pl.pallas_call(
        functools.partial(_dgrad_kernel, n_k=grid[2], k_tail=_tail(n, an)),
        out_shape=(jax.ShapeDtypeStruct((m, k), dt), jax.ShapeDtypeStruct((m, k), dt)),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            grid=grid,
            in_specs=[pl.BlockSpec((am, an), lambda i, j, kk: (i, kk)), pl.BlockSpec((ak, an), lambda i, j, kk: (j, kk)),
                      gu_spec, gu_spec],
            out_specs=(gu_spec, gu_spec),
            scratch_shapes=[pltpu.VMEM((am, ak), jnp.float32)],
        ),
        compiler_params=_params(_epilogue_need(am, ak, an, itemsize, apass)),
        cost_estimate=cost(2 * m * n * k * apass, m * k, (m * n + k * n + 4 * m * k) * itemsize),
    )(d, w, gate, up)
    grid = (pl.cdiv(k, wk), pl.cdiv(n, wn), pl.cdiv(m, wm))
    h_spec = pl.BlockSpec((wm, wk), lambda i, j, kk: (kk, i))
    grad_w = pl.pallas_call(
        functools.partial(_wgrad_kernel, n_k=grid[2], k_tail=_tail(m, wm)),
        out_shape=jax.ShapeDtypeStruct((k, n), dt),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            grid=grid,
            in_specs=[h_spec, h_spec, pl.BlockSpec((wm, wn), lambda i, j, kk: (kk, j))],
            out_specs=pl.BlockSpec((wk, wn), lambda i, j, kk: (i, j)),
            scratch_shapes=_acc_scratch(dt, wk, wn),
        ),
        compiler_params=_params(_prologue_need(wk, wn, wm, itemsize, wpass)),
        cost_estimate=cost(2 * m * n * k * wpass, m * k * grid[1], (2 * m * k + m * n + k * n) * itemsize),
    )(gate, up, d)
    return grad_gate, grad_up, grad_w


def _tail(dim, block: int) -> int:
    """Valid entries in the last block of a contraction of `dim` in `block`s (0: it divides)."""
    return 0 if export.is_symbolic_dim(dim) else dim % block


def _acc_scratch(dtype, rows: int, cols: int) -> list:
    """A float32 accumulator, unless the result is float32 and accumulates in place."""
    return [] if jnp.dtype(dtype) == jnp.float32 else [pltpu.VMEM((rows, cols), jnp.float32)]


__all__ = ["swiglu_matmul", "swiglu_matmul_add", "swiglu_matmul_backward"]
