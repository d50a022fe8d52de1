"""A fused LM head and cross-entropy as Pallas TPU kernels: the loss of
`softmax(hidden @ weight.T)` against integer labels, and its gradients, without the
[tokens, vocabulary] logits ever reaching HBM.

hidden: [..., d]; weight: [vocabulary, d] (an LM head's, as `nn.Linear` stores it); labels:
[...] integers, `ignore_index` marking tokens that add nothing. Optional: Gemma 2's final
soft-capping of the logits (`softcap`: z = c * tanh(l / c)) and torch's `label_smoothing`
(not both at once).

Forward, grid (token blocks, vocabulary blocks): a token block stays in VMEM while the
weight's blocks stream past. Each step computes a [block_t, block_v] tile of logits and
folds it into the running row max m and sum s of exp(z - m) (flash attention's online
softmax), picks the label's logit where it falls in the tile, and accumulates

    acc = sum_j exp(z_j - m) * z'_j @ W_j        (rescaled as m grows; z' = dz/dl, 1 without softcap)

so that the last step has lse = m + log(s) and acc / s = sum_j p_j z'_j W_j, the softmax half
of d(loss_t)/d(hidden_t). The label half, -z'_y * W[y], is a gather outside the kernel. The
forward thus returns each token's loss and its hidden gradient: the backward only scales it.
`linear_cross_entropy_loss` is the same kernel without that second matmul, the op's
`visible_kernel` (a TPU call needing no gradient, such as an evaluation, runs it).

Backward (the weight's gradient), grid (vocabulary blocks, token blocks): a weight block
stays in VMEM while the token blocks stream past, the logits are recomputed tile by tile,
and dW_j = sum_t g_t * (p_tj - onehot_tj) * z'_tj * h_t accumulates in float32 VMEM, g_t being
each token's share of the incoming gradient (1/count for "mean", 0 where ignored).

Four [tokens, d] x [d, vocabulary] matmuls in all (logits twice, the two gradients once each),
against the unfused path's three plus its logits' HBM traffic; Tokamax's Mosaic kernel makes
the same trade. A vocabulary no block divides is not padded in memory: the last block reads
past the weight's end, so its rows there are zeroed and their logits masked; tokens are padded
to a whole block (hidden is the small operand).

A label outside [0, vocabulary) that is not `ignore_index` gives a NaN loss and NaN
gradients for its token (torch raises; a kernel cannot, and a silently wrong loss is worse).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import export
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels.kernels import _vmem
from tpu_kernels.kernels._blocks import LANES, SUBLANES, check_aligned, cost, is_empty, lanes, require_float
from tpu_kernels.kernels._config import BlockConfig
from tpu_kernels.kernels.linear_cross_entropy.jax_reference import REDUCTIONS, linear_cross_entropy_jax

KERNEL = "linear_cross_entropy"  # error messages start with it
MASK = -0.7 * float(jnp.finfo(jnp.float32).max)  # finite: exp(MASK - m) is 0, never NaN
SEMANTICS = ("parallel", "arbitrary")
# (block_t, block_v) tried in order when the blocks are left unset, the first whose VMEM need
# fits (`_vmem.fits`). The forward streams the weight past a token block (arithmetic intensity
# 2 * block_t flops per weight byte), the backward streams tokens past a weight block (2 *
# block_v per hidden byte): each leads with the block that sets its intensity.
FORWARD_BLOCKS = ((512, 256), (256, 512), (256, 256), (128, 256), (128, 128))
BACKWARD_BLOCKS = ((256, 512), (512, 256), (256, 256), (128, 256), (128, 128))
# Seconds per padded token of a token block, relative to 256 and up: on a v5e every block of
# 256-1024 tokens ran both kernels within 2% of the others at 8192 tokens, and padding 1192
# tokens to 512-blocks (1536) cost what it pads (bench/reports/chip_v5e_linear_cross_entropy.json,
# "blocks"); 128-token blocks stream the weight at 256 flops per byte, the v5e's ridge.
TOKEN_BLOCK_COST = {128: 1.25}


@dataclass(frozen=True)
class Config(BlockConfig):
    """linear_cross_entropy's blocks (`_config`): block_t tokens and block_v vocabulary rows per
    grid step, one pair for the forward and the backward kernels."""

    block_t: int | None = None
    block_v: int | None = None
    SPACE = {"block_t": [128, 256, 512], "block_v": [128, 256, 512, 1024]}

    @classmethod
    def default(cls, hidden_shape, weight_shape, dtype, *, backward: bool = False) -> Config:
        """The blocks a call leaving both unset runs its forward (or `backward`) kernel with: the
        kernel's own plan (`_plan`) over FORWARD_BLOCKS (or BACKWARD_BLOCKS). A call that sets
        one block plans the other with it fixed."""
        tokens = math.prod(hidden_shape[:-1])
        d, vocab, itemsize = hidden_shape[-1], weight_shape[0], jnp.dtype(dtype).itemsize
        candidates, need = (BACKWARD_BLOCKS, _backward_need) if backward else (FORWARD_BLOCKS, _forward_need)
        plan = _plan(tokens, vocab, d, itemsize, None, None, None, 0.0, candidates, need)
        return cls(plan.bt, plan.bv)


def _acc(dtype) -> jnp.dtype:
    return jnp.promote_types(dtype, jnp.float32)


@dataclass(frozen=True)
class Plan:
    """One kernel's blocks over `tokens` (padded to `tp`) and `vocab` (a ragged last block)."""

    tokens: int
    vocab: int  # a concrete int in the kernels (symbolic sizes trace shapes only: see _plan)
    d: int
    bt: int
    bv: int
    tp: int
    nv: int
    ragged: bool  # the last vocabulary block reads past the weight's end
    softcap: float | None
    smoothing: float

    @property
    def nt(self):
        return self.tp // self.bt


# ---- the kernels' shared tile ---------------------------------------------------------------


def _weight(w_ref, j, plan: Plan) -> jax.Array:
    """Weight block j, its rows past the vocabulary zeroed (the last block reads past the
    array's end, whose VMEM holds whatever was there: zeros keep every product finite)."""
    w = w_ref[...]
    if plan.ragged:
        rows = j * plan.bv + jax.lax.broadcasted_iota(jnp.int32, (plan.bv, 1), 0)
        w = jnp.where(rows < plan.vocab, w, jnp.zeros_like(w))
    return w


def _tile(h, w, j, plan: Plan, acc):
    """-> (z, dz/dl, columns, valid) for one [block_t, block_v] tile: the (capped) logits, masked
    to MASK past the vocabulary; the cap's derivative (None without softcap); each entry's
    vocabulary index; and where the index is a real entry (None when every one is)."""
    logits = jax.lax.dot_general(h, w, (((1,), (1,)), ((), ())), preferred_element_type=acc)
    cols = j * plan.bv + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    slope = None
    if plan.softcap is not None:
        t = jnp.tanh(logits / plan.softcap)
        logits, slope = plan.softcap * t, 1.0 - t * t
    valid = None
    if plan.ragged:
        valid = cols < plan.vocab
        logits = jnp.where(valid, logits, MASK)
    return logits, slope, cols, valid


def _fwd_kernel(h_ref, w_ref, y_ref, lse_ref, target_ref, *refs, plan: Plan, grad: bool):
    """One token block (program axis 0) over the vocabulary blocks (axis 1); with `grad`, its
    outputs end with the hidden gradient's block (the second matmul), else the loss alone."""
    dh_ref, (m_sc, s_sc, t_sc) = (refs[0], refs[1:]) if grad else (None, refs)
    j = pl.program_id(1)
    d = h_ref.shape[1]

    @pl.when(j == 0)
    def _init():
        m_sc[...] = jnp.full_like(m_sc, -jnp.inf)
        s_sc[...] = jnp.zeros_like(s_sc)
        t_sc[...] = jnp.zeros_like(t_sc)
        if grad:
            dh_ref[...] = jnp.zeros_like(dh_ref)

    h, w = h_ref[...], _weight(w_ref, j, plan)
    z, slope, cols, valid = _tile(h, w, j, plan, m_sc.dtype)
    m_prev = m_sc[...]
    m_new = jnp.maximum(m_prev, jnp.max(z, axis=-1, keepdims=True))
    rescale = jnp.exp(m_prev - m_new)  # 0 at the first block (m_prev = -inf)
    p = jnp.exp(z - lanes(m_new, plan.bv))  # 0 past the vocabulary
    s_sc[...] = rescale * s_sc[...] + jnp.sum(p, axis=-1, keepdims=True)
    # the label's logit (once, in the block holding it), plus the smoothing's share of every logit
    target = jnp.where(cols == y_ref[...], (1.0 - plan.smoothing) * z, 0.0)
    if plan.smoothing:
        target += (plan.smoothing / plan.vocab) * (z if valid is None else jnp.where(valid, z, 0.0))
    t_sc[...] += jnp.sum(target, axis=-1, keepdims=True)
    if grad:
        q = p if slope is None else p * slope
        dh_ref[...] = lanes(rescale, d) * dh_ref[...] + jnp.dot(
            q.astype(w.dtype), w, preferred_element_type=dh_ref.dtype
        )
    m_sc[...] = m_new

    @pl.when(j == pl.num_programs(1) - 1)
    def _finish():
        total = s_sc[...]
        lse_ref[...] = (m_sc[...] + jnp.log(total))[:, :1]
        target_ref[...] = t_sc[...][:, :1]
        if grad:
            dh_ref[...] = dh_ref[...] / lanes(total, d)


def _dw_kernel(h_ref, w_ref, y_ref, lse_ref, g_ref, dw_ref, acc_sc, *, plan: Plan):
    """One weight block (program axis 0) over the token blocks (axis 1)."""
    j, i = pl.program_id(0), pl.program_id(1)

    @pl.when(i == 0)
    def _init():
        acc_sc[...] = jnp.zeros_like(acc_sc)

    h = h_ref[...]
    z, slope, cols, valid = _tile(h, _weight(w_ref, j, plan), j, plan, acc_sc.dtype)
    grad = jnp.exp(z - lse_ref[...]) - jnp.where(cols == y_ref[...], 1.0 - plan.smoothing, 0.0)
    if plan.smoothing:
        grad -= plan.smoothing / plan.vocab
    if slope is not None:
        grad *= slope
    grad *= g_ref[...]  # each token's share of the incoming gradient (0: ignored or padded)
    if valid is not None:
        grad = jnp.where(valid, grad, 0.0)
    transposed_lhs = (((0,), (0,)), ((), ()))  # grad^T @ h without materialising grad^T
    acc_sc[...] += jax.lax.dot_general(
        grad.astype(h.dtype), h, transposed_lhs, preferred_element_type=acc_sc.dtype
    )

    @pl.when(i == pl.num_programs(1) - 1)
    def _finish():
        dw_ref[...] = acc_sc[...].astype(dw_ref.dtype)


# ---- blocks, padding and checks -------------------------------------------------------------


def _forward_need(bt: int, bv: int, d: int, itemsize: int) -> int:
    """VMEM bytes of the forward: hidden and weight blocks and the float32 hidden gradient
    (its accumulator), each double-buffered, the lane-dense row statistics, and about five
    [block_t, block_v] float32 temporaries of the body (logits, probabilities, masks)."""
    lanes = _vmem.padded_cols(d)
    return 2 * (bt + bv) * lanes * itemsize + 2 * bt * lanes * 4 + 3 * bt * LANES * 4 + 5 * bt * bv * 4


def _backward_need(bt: int, bv: int, d: int, itemsize: int) -> int:
    """VMEM bytes of the backward: hidden, weight and weight-gradient blocks double-buffered,
    the float32 accumulator, and the body's temporaries."""
    lanes = _vmem.padded_cols(d)
    return 2 * (bt + 2 * bv) * lanes * itemsize + bv * lanes * 4 + 5 * bt * bv * 4


def _plan(
    tokens, vocab: int, d: int, itemsize: int, block_t, block_v, softcap, smoothing, candidates, need
) -> Plan:
    """The blocks: the caller's, or of `candidates` whose VMEM `need` fits, the one padding the
    tokens least (priced by TOKEN_BLOCK_COST; ties: the first); each capped at its whole
    dimension (tokens rounded up to the sublane tile), the tokens padded to whole blocks. Symbolic token counts (torch.compile's dynamic
    shapes: the fake traces shapes only) keep the first candidate, unpadded, and the kernels
    see a stand-in vocabulary of one block."""
    if block_t is not None:
        check_aligned(f"{KERNEL}: block_t", block_t, SUBLANES)
    if block_v is not None:
        check_aligned(f"{KERNEL}: block_v", block_v, LANES)
    if any(export.is_symbolic_dim(n) for n in (tokens, vocab, d)):  # shapes only
        bt, bv = block_t or candidates[0][0], block_v or candidates[0][1]
        return Plan(tokens, bv, d, bt, bv, tokens, -(-vocab // bv), True, softcap, smoothing)
    rows = 2 * SUBLANES if itemsize < 4 else SUBLANES
    whole = -(-tokens // rows) * rows  # the tokens as one block

    def padded(bt: int) -> int:
        bt = min(bt, whole)
        return -(-tokens // bt) * bt

    fitting = [
        (block_t or t, block_v or v)
        for t, v in candidates
        if _vmem.fits(need(block_t or t, block_v or v, d, itemsize))
    ] or [(block_t or candidates[-1][0], block_v or candidates[-1][1])]
    # the fewest padded tokens, priced per block (TOKEN_BLOCK_COST); ties keep the order
    bt, bv = min(fitting, key=lambda c: padded(c[0]) * TOKEN_BLOCK_COST.get(c[0], 1.0))
    if vocab <= bv:
        bv = vocab  # one block, the whole dimension (no alignment asked)
    bt = min(bt, whole)
    tp = padded(bt)
    return Plan(tokens, vocab, d, bt, bv, tp, -(-vocab // bv), vocab % bv != 0, softcap, smoothing)


def _check(hidden, weight, labels, ignore_index, reduction, softcap, label_smoothing) -> None:
    require_float(KERNEL, hidden=hidden, weight=weight)
    if not jnp.issubdtype(labels.dtype, jnp.integer) or labels.dtype == jnp.bool_:
        raise TypeError(
            f"{KERNEL}: argument 'labels' has dtype {labels.dtype}; expected integer class indices "
            "(int64 or int32), as torch's cross_entropy takes them."
        )
    if weight.ndim != 2 or hidden.ndim < 1 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"{KERNEL}: expected hidden [..., d] and weight [vocabulary, d] (an nn.Linear's), got hidden "
            f"{tuple(hidden.shape)} and weight {tuple(weight.shape)}."
        )
    if tuple(labels.shape) != tuple(hidden.shape[:-1]):
        raise ValueError(
            f"{KERNEL}: labels must have hidden's leading shape {tuple(hidden.shape[:-1])} (one class per "
            f"token), got {tuple(labels.shape)}."
        )
    if hidden.dtype != weight.dtype:
        raise ValueError(
            f"{KERNEL}: hidden and weight must have one dtype, got {hidden.dtype} and {weight.dtype}."
        )
    if weight.shape[0] == 0:
        raise ValueError(f"{KERNEL}: argument 'weight' has no rows: the vocabulary needs at least one class.")
    if reduction not in REDUCTIONS:
        raise ValueError(f"{KERNEL}: reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}.")
    if softcap is not None and not softcap > 0:
        raise ValueError(f"{KERNEL}: softcap must be a positive number or None, got {softcap!r}.")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{KERNEL}: label_smoothing must lie in [0, 1], got {label_smoothing!r}.")
    if softcap is not None and label_smoothing:
        raise ValueError(
            f"{KERNEL}: softcap and label_smoothing together are not supported (the smoothed gradient "
            "needs a second capped sum over the vocabulary); pass one of them."
        )
    del ignore_index


def _pad_rows(x: jax.Array, rows, value=0) -> jax.Array:
    extra = rows - x.shape[0]
    if export.is_symbolic_dim(extra) or extra == 0:
        return x
    return jnp.pad(x, [(0, extra)] + [(0, 0)] * (x.ndim - 1), constant_values=value)


def _flat(hidden, labels):
    """[tokens, d] and [tokens, 1] int32 views of the caller's [..., d] and [...]."""
    tokens = math.prod(hidden.shape[:-1])  # not reshape(-1, d): d may be 0
    return hidden.reshape(tokens, hidden.shape[-1]), labels.reshape(tokens, 1).astype(jnp.int32)


# ---- the op's two functions ---------------------------------------------------------------


def _forward(
    hidden, weight, labels, ignore_index, reduction, softcap, label_smoothing, block_t, block_v, grad
):
    """-> (loss, lse, dhidden or None): the forward kernel, with the hidden gradient's matmul
    when `grad`."""
    _check(hidden, weight, labels, ignore_index, reduction, softcap, label_smoothing)
    acc = _acc(hidden.dtype)
    h, y = _flat(hidden, labels)
    tokens, d = h.shape
    vocab = weight.shape[0]
    if is_empty(h):  # no tokens, or d = 0 (every logit 0): no grid to run
        loss, lse = linear_cross_entropy_jax(
            hidden,
            weight,
            labels,
            ignore_index=ignore_index,
            reduction=reduction,
            softcap=softcap,
            label_smoothing=label_smoothing,
        )
        return loss, lse.reshape(-1), jnp.zeros(h.shape, acc) if grad else None
    itemsize = jnp.dtype(hidden.dtype).itemsize
    plan = _plan(
        tokens, vocab, d, itemsize, block_t, block_v, softcap, label_smoothing, FORWARD_BLOCKS, _forward_need
    )
    row = pl.BlockSpec((plan.bt, 1), lambda i, j: (i, 0))
    tokens_spec = pl.BlockSpec((plan.bt, d), lambda i, j: (i, 0))
    stat = jax.ShapeDtypeStruct((plan.tp, 1), acc)
    outs = pl.pallas_call(
        functools.partial(_fwd_kernel, plan=plan, grad=grad),
        out_shape=(stat, stat, jax.ShapeDtypeStruct((plan.tp, d), acc)) if grad else (stat, stat),
        grid=(plan.nt, plan.nv),
        in_specs=[tokens_spec, pl.BlockSpec((plan.bv, d), lambda i, j: (j, 0)), row],
        out_specs=(row, row, tokens_spec) if grad else (row, row),
        scratch_shapes=[pltpu.VMEM((plan.bt, LANES), acc) for _ in range(3)],
        compiler_params=_vmem.compiler_params(SEMANTICS, _forward_need(plan.bt, plan.bv, d, itemsize)),
        cost_estimate=cost(
            (4 if grad else 2) * plan.tp * vocab * d,
            plan.tp * vocab * (2 if softcap is not None else 1),
            (plan.nt * vocab * d + plan.tp * d) * itemsize + (plan.tp * d * 4 if grad else 0),
        ),
    )(_pad_rows(h, plan.tp), weight, _pad_rows(y, plan.tp, -1))
    lse, target = outs[0][:tokens, 0], outs[1][:tokens, 0]
    labels_flat = y[:, 0]
    ignored = labels_flat == ignore_index
    in_range = (labels_flat >= 0) & (labels_flat < vocab)
    losses = jnp.where(ignored, 0.0, jnp.where(in_range, lse - target, jnp.nan))
    if reduction == "none":
        loss = losses.reshape(labels.shape)
    else:
        loss = jnp.sum(losses)
        if reduction == "mean":
            loss = loss / jnp.sum(~ignored).astype(acc)
    if not grad:
        return loss.astype(hidden.dtype), lse, None
    # the label's half of each token's hidden gradient: -(1 - smoothing) * z'_y * W[y], and the
    # smoothing's -smoothing / vocabulary * sum_j W_j
    coef = jnp.full_like(target, 1.0 - label_smoothing)
    if softcap is not None:
        coef = 1.0 - (target / softcap) ** 2
    picked = jnp.take(weight, jnp.clip(labels_flat, 0, vocab - 1), axis=0).astype(acc)
    dhidden = outs[2][:tokens] - coef[:, None] * picked
    if label_smoothing:
        dhidden -= label_smoothing / jnp.asarray(vocab, acc) * jnp.sum(weight.astype(acc), axis=0)
    return loss.astype(hidden.dtype), lse, dhidden


def linear_cross_entropy(
    hidden: jax.Array,  # [..., d]
    weight: jax.Array,  # [vocabulary, d]
    labels: jax.Array,  # [...] integers
    *,
    ignore_index: int = -100,
    reduction: str = "mean",
    softcap: float | None = None,
    label_smoothing: float = 0.0,
    block_t: int | None = None,
    block_v: int | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """-> (loss, lse [tokens] float32, dhidden [tokens, d] float32): the loss in hidden's dtype
    (a scalar, or labels' shape for reduction="none"); each token's log-sum-exp over the
    vocabulary; and d(token loss)/d(hidden), which the backward scales."""
    return _forward(
        hidden, weight, labels, ignore_index, reduction, softcap, label_smoothing, block_t, block_v, True
    )


def linear_cross_entropy_loss(
    hidden: jax.Array,
    weight: jax.Array,
    labels: jax.Array,
    *,
    ignore_index: int = -100,
    reduction: str = "mean",
    softcap: float | None = None,
    label_smoothing: float = 0.0,
    block_t: int | None = None,
    block_v: int | None = None,
) -> jax.Array:
    """The loss alone, without the hidden gradient's matmul (half the forward's work): the op's
    `visible_kernel`, which a TPU call needing no gradient (evaluation) runs."""
    return _forward(
        hidden, weight, labels, ignore_index, reduction, softcap, label_smoothing, block_t, block_v, False
    )[0]


def _shares(grad_loss, labels_flat, vocab: int, ignore_index: int, reduction: str, acc) -> jax.Array:
    """[tokens] each token's share of the incoming gradient: 0 where ignored, NaN for a label
    outside the vocabulary."""
    ignored = labels_flat == ignore_index
    g = grad_loss.astype(acc)
    if reduction == "none":
        g = g.reshape(-1)
    elif reduction == "mean":
        g = g / jnp.sum(~ignored).astype(acc)
    g = jnp.where(ignored, 0.0, g)
    return jnp.where(ignored | ((labels_flat >= 0) & (labels_flat < vocab)), g, jnp.nan)


def linear_cross_entropy_backward(
    hidden: jax.Array,
    weight: jax.Array,
    labels: jax.Array,
    loss: jax.Array,
    lse: jax.Array,  # the forward's residuals
    dhidden: jax.Array,
    grad_loss: jax.Array,
    *,
    ignore_index: int = -100,
    reduction: str = "mean",
    softcap: float | None = None,
    label_smoothing: float = 0.0,
    block_t: int | None = None,
    block_v: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """-> (grad_hidden, grad_weight)."""
    del loss
    acc = _acc(hidden.dtype)
    h, y = _flat(hidden, labels)
    tokens, d = h.shape
    vocab = weight.shape[0]
    shares = _shares(grad_loss, y[:, 0], vocab, ignore_index, reduction, acc)
    grad_hidden = (dhidden * shares[:, None]).astype(hidden.dtype).reshape(hidden.shape)
    if is_empty(h):
        return grad_hidden, jnp.zeros_like(weight)
    itemsize = jnp.dtype(hidden.dtype).itemsize
    plan = _plan(
        tokens,
        vocab,
        d,
        itemsize,
        block_t,
        block_v,
        softcap,
        label_smoothing,
        BACKWARD_BLOCKS,
        _backward_need,
    )
    row = pl.BlockSpec((plan.bt, 1), lambda j, i: (i, 0))
    weight_spec = pl.BlockSpec((plan.bv, d), lambda j, i: (j, 0))
    grad_weight = pl.pallas_call(
        functools.partial(_dw_kernel, plan=plan),
        out_shape=jax.ShapeDtypeStruct(weight.shape, weight.dtype),
        grid=(plan.nv, plan.nt),
        in_specs=[pl.BlockSpec((plan.bt, d), lambda j, i: (i, 0)), weight_spec, row, row, row],
        out_specs=weight_spec,
        scratch_shapes=[pltpu.VMEM((plan.bv, d), acc)],
        compiler_params=_vmem.compiler_params(SEMANTICS, _backward_need(plan.bt, plan.bv, d, itemsize)),
        cost_estimate=cost(
            4 * plan.tp * vocab * d,
            plan.tp * vocab * (2 if softcap is not None else 1),
            (plan.nv * plan.tp * d + 2 * vocab * d) * itemsize,
        ),
    )(
        _pad_rows(h, plan.tp),
        weight,
        _pad_rows(y, plan.tp, -1),
        _pad_rows(lse.astype(acc)[:, None], plan.tp),
        _pad_rows(shares[:, None], plan.tp),
    )
    return grad_hidden, grad_weight


__all__ = [
    "KERNEL",
    "Config",
    "Plan",
    "linear_cross_entropy",
    "linear_cross_entropy_backward",
    "linear_cross_entropy_loss",
]
