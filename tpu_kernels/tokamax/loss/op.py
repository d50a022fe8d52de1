"""Fused LM-head loss: torch.ops.tokamax.linear_softmax_cross_entropy_loss.

    loss = reduction(cross_entropy(x @ weight, labels))

Arguments in Tokamax's order, (x, labels, weight), with weight [H, V], or with
`weight_layout="out_in"` the [V, H] an `nn.Linear(H, V)` LM head stores, used as
it is: the op transposes it inside its JAX function, where XLA folds the transpose
into the matmul (the "xla" implementation; no weight-sized copy, forward or
backward: tests/tokamax/test_weight_layout.py counts the bytes). Tokamax's TPU
kernel ("mosaic_tpu") reads [H, V] only, so there XLA makes the transposed copy on
the device. Passing `linear.weight.T` instead copies the whole LM head per call on
CPU and CUDA (the bridge needs contiguous memory). Differences from
`F.cross_entropy(x @ weight, labels)`: the default reduction is "sum" (torch's
is "mean"); the loss is always float32, whatever x's dtype; there is no
ignore_index (every label must be in [0, V): an out-of-range label gives a
forward loss of 0 for its row but a nonzero gradient).

Tokamax's "chunked_xla" implementation pads the vocabulary to a multiple of
its 2048-column block and counts the padding in the softmax, so its loss is
wrong unless V % 2048 == 0 (Tokamax 0.0.17); asking for it with another V is
an error here.
"""

from __future__ import annotations

import tokamax
import torch

from tpu_kernels.tokamax import implementation as impl
from tpu_kernels.tokamax.loss import reference
from tpu_kernels.tokamax.placements import rule
from tpu_kernels.tokamax.wrap import call_op, public_op
from tpu_kernels.verification.tolerance import Reference, rms, rows

IMPLEMENTATIONS = (
    impl.table(
        "linear_softmax_cross_entropy_loss",
        {"chunked_xla": impl.EVERYWHERE, "mosaic_tpu": impl.TPU_ONLY},
        tpu="mosaic_tpu,xla",
    ),
)

REDUCTIONS = ("sum", "mean", "none")
WEIGHT_LAYOUTS = ("in_out", "out_in")  # Tokamax's [H, V]; nn.Linear's [V, H]
CHUNKED_BLOCK = 2048  # chunked_xla's default v_block_size in Tokamax 0.0.17


def _loss_outputs(x, labels, weight, *, reduction="sum", **kwargs) -> torch.Tensor:  # any layout
    shape = (x.shape[0],) if reduction == "none" else ()
    return x.new_empty(shape, dtype=torch.float32)


def linear_softmax_cross_entropy_loss(
    x: torch.Tensor,
    labels: torch.Tensor,
    weight: torch.Tensor,
    *,
    reduction: str = "sum",
    weight_layout: str = "in_out",
    implementation: str | None = None,
) -> torch.Tensor:
    """Cross entropy of the logits x @ weight, without materialising them on TPU.

    Args:
      x: [B, H], the last hidden states (flatten [batch, seq, H] to [B, H]).
      labels: int [B], each in [0, V) (cast to int32; no gradient).
      weight: [H, V], the LM head; [V, H] (nn.Linear's) with weight_layout="out_in".
      reduction: "sum" (Tokamax's default), "mean" or "none".
      weight_layout: "in_out" (Tokamax's [H, V]) or "out_in" (nn.Linear's [V, H],
        used without a copy).
      implementation: "xla", "chunked_xla" (needs V % 2048 == 0), "mosaic_tpu"
        (TPU); None chooses by device.

    Returns:
      float32: a scalar, or [B] for reduction="none".
    """
    if reduction not in REDUCTIONS:
        raise ValueError(
            f"tokamax.linear_softmax_cross_entropy_loss: reduction={reduction!r}; use one of {REDUCTIONS}."
        )
    if weight_layout not in WEIGHT_LAYOUTS:
        raise ValueError(
            f"tokamax.linear_softmax_cross_entropy_loss: weight_layout={weight_layout!r}; use 'in_out' "
            "(Tokamax's [H, V]) or 'out_in' (nn.Linear's [V, H])."
        )
    h_dim = 1 if weight_layout == "out_in" else 0
    if x.ndim != 2 or weight.ndim != 2 or x.shape[1] != weight.shape[h_dim] or labels.shape != (x.shape[0],):
        want = "[V, H] (weight_layout='out_in')" if h_dim else "[H, V]"
        raise ValueError(
            f"tokamax.linear_softmax_cross_entropy_loss: needs x [B, H], labels [B], weight {want} "
            f"(Tokamax's argument order); got {tuple(x.shape)}, {tuple(labels.shape)}, "
            f"{tuple(weight.shape)}."
        )
    vocab = weight.shape[1 - h_dim]
    chosen = impl.resolve_implementation("linear_softmax_cross_entropy_loss", x.device, implementation)
    if "chunked_xla" in chosen.split(",") and vocab % CHUNKED_BLOCK != 0:
        raise ValueError(
            f"tokamax.linear_softmax_cross_entropy_loss: implementation='chunked_xla' gives a wrong loss "
            f"unless V % {CHUNKED_BLOCK} == 0 (Tokamax 0.0.17 counts the vocabulary padding in the "
            f"softmax), and V = {vocab}; use implementation='xla'."
        )
    labels, implementation = labels.to(torch.int32), chosen
    return call_op(linear_softmax_cross_entropy_loss_op, locals())


def _linear_softmax_cross_entropy_loss(
    x, labels, weight, *, reduction, weight_layout="in_out", implementation
):
    if weight_layout == "out_in":
        # A transpose XLA folds into the matmuls: no copy of the LM head. The reduction is
        # done here, on the per-row losses: Tokamax's backward scales its [H, V] weight
        # gradient by the scalar cotangent after the matmul, and XLA then keeps that
        # gradient as a weight-sized temporary before transposing it (2 MiB for a 2 MiB
        # head, tests/tokamax/test_weight_layout.py); a per-row cotangent scales the rows
        # before it, and the transpose folds again.
        weight = weight.T
        if reduction != "none":
            per_row = _losses(x, labels, weight, "none", implementation)
            return per_row.sum() if reduction == "sum" else per_row.mean()
    return _losses(x, labels, weight, reduction, implementation)


def _losses(x, labels, weight, reduction, implementation):
    if implementation is None:
        return tokamax.linear_softmax_cross_entropy_loss(x, labels, weight, reduction=reduction)
    # Tokamax takes one name here, not a fallback order (a tuple): walk the order ourselves.
    errors = []
    for name in (implementation,) if isinstance(implementation, str) else implementation:
        try:
            return tokamax.linear_softmax_cross_entropy_loss(
                x, labels, weight, reduction=reduction, implementation=name
            )
        except NotImplementedError as e:
            errors.append(e)
    if len(errors) == 1:
        raise errors[0]
    raise ExceptionGroup("all implementations failed", errors)


@rule(
    "rows: x and labels sharded on B with weight Replicate; the loss is sharded for "
    'reduction="none", Partial for "sum", and Replicate (gathered) for "mean"'
)
def _sharding(a):
    """Each row's loss needs the whole vocabulary (the softmax), so V is not shardable; a
    mean over uneven shards is not a sum of per-shard means, so "mean" has no local strategy."""
    from torch.distributed.tensor import Partial, Shard

    rows = {"x": Shard(0), "labels": Shard(0)}
    reduction = a.get("reduction", "sum")
    if reduction == "none":
        return [([Shard(0)], rows)]
    if reduction == "sum":
        return [([Partial()], rows)]
    return []


def _computes_in(x):
    # The loss is float32 for every input dtype, but Tokamax rounds the logits to x's dtype
    # when it is narrower (bf16: a loss 3e-3 off at hidden 32), and computes the logsumexp
    # in float32 when x is wider (float64).
    return x.dtype if x.dtype.itemsize < 4 else torch.float32


def _sums(x, reduction="sum"):
    # each logit sums hidden products; the "sum" reduction adds the rows' losses
    return x.shape[-1] * (rows(x) if reduction == "sum" else 1)


# The op's body walks the implementation order. autocast "fp32": a loss, as torch's
# autocast runs cross_entropy.
linear_softmax_cross_entropy_loss_op = public_op(
    linear_softmax_cross_entropy_loss,
    calls=_linear_softmax_cross_entropy_loss,
    symbolic_fake=_loss_outputs,
    sharding=_sharding,
    autocast="fp32",
    check_reference=Reference(
        reference.linear_softmax_cross_entropy_loss,
        reduces=_sums,
        scale=lambda x, weight: 4 * max(1.0, rms(x) * rms(weight)),
        grad_reduces=1,
        grad_scale=lambda x: 2 * rows(x),
        computes_in=_computes_in,
    ),
)
