"""The options of a kernel op, written once: `tpu_kernel`, `KernelOp` and `tokamax_op` all
take them as keywords and build this object, so a new option is one field here."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch


@dataclasses.dataclass(frozen=True)
class OpOptions:
    """What `tpu_kernel(name, **options)` accepts beside the kernel.

    Attributes:
      outputs: names of the outputs (for `def_backward` binding and residuals).
      residuals: trailing outputs saved for backward and not returned by the call.
      mutates_args: tensor parameters the op writes to.
      backward: "vjp" to derive the backward with jax.vjp of the body.
      reference: a differentiable JAX function with the same signature whose vjp
        gives the backward (for a Pallas forward JAX cannot differentiate); also
        checked mode's reference when `check_reference` is not given.
      check_reference: what checked mode (`tpu_kernels.checked()`) compares each
        call with: a torch function taking the op's parameters by name and returning
        its visible outputs, or a `tpu_kernels.Reference` (its reduction lengths and
        tolerance scales, parameters it ignores; see tpu_kernels.verification.tolerance).
      cache_size: compiled callables kept per device (LRU).
      noncontiguous: "copy" (default: such inputs are copied to contiguous
        memory first) or "error".
      tags: torch.Tag values for the operator (e.g. torch.Tag.pointwise).
      examples: a function returning representative calls, [(args, kwargs), ...],
        with jax.ShapeDtypeStructs (or tensors) for the tensor arguments; the TPU
        lowering check (`tpu-kernels check`) lowers the kernel at each.
      tune: the statics the op may tune (docs/autotuning.md): a dict of candidate lists,
        {"block_rows": [128, 256, 512]} (every combination is a candidate), or a list of
        configs, [{"block_m": 128, "block_n": 256}, ...]. Each names a static with a default,
        the value calls get until a tuned table says otherwise. `tpu_kernels.autotune` finds
        the best per chip, dtypes and shape bucket; calls read the op's tables.
      cost: the op's own cost model, for the tuner's predicted ranking of `tune` candidates
        on a TPU it does not run on (`tpu-kernels tune --chips`): `cost(chip, *args, **kwargs)`
        with the op's arguments (tensors or jax.ShapeDtypeStructs) and a candidate's statics,
        and `chip` the predicted chip's figures (`tpu_kernels.autotuner.predict.ChipFigures`),
        returning the call's seconds; its attribute `tie`, if any, is the relative difference
        below which the model cannot tell two configs apart (they tie, and the declared order,
        the default first, decides). Without it the tuner's roofline over the traced kernel
        prices them (autotuner/predict.py). A family whose default statics come from a cost
        model gives that model here, so that its default and its prediction agree.
      tune_key: which calls share a tuned config: a function of the op's arguments by keyword
        returning a tuple (the shape bucket); default: every tensor dim rounded up to a power
        of two (tpu_kernels.tunables.bucket).
      autotune: Helion kernels only: let Helion autotune on the first call per shape
        (results cached on disk); by default a fixed or the default config is used.
      float_only: Helion kernels only: tensor parameters that must be floating point; an
        integer or bool input raises the shipped ops' TypeError naming the op and the
        argument (docs/dtypes.md). Helion's host code cannot raise; a JAX body checks
        dtypes itself while traced.
      visible_kernel: ops with `residuals` only: a kernel of the same parameters (a Helion
        kernel for a Helion op, a JAX function for a JAX body) that returns the visible outputs
        alone (the residuals left uncomputed). A TPU call that needs no gradient launches it in
        place of the full kernel: each output of a launch costs torch_tpu about as much as the
        call (docs/devices.md), and the residuals' work is spared where it is not free
        (linear_cross_entropy's hidden gradient is a second matmul). Without one, a JAX body's
        visible-only kernel is derived from it: the residuals computed and dropped.
      autocast: what the op does inside `torch.autocast`: "keep" (default: runs
        in its inputs' dtypes, as torch does for custom ops), "lower_precision_fp"
        (floating inputs cast to the autocast dtype, like aten.mm), "fp32" (cast
        to float32, like CUDA's softmax and norms) or "promote" (to the widest
        floating input dtype). See tpu_kernels.dispatch.autocast.
      sharding: how the op runs on DTensors (docs/distributed.md): "pointwise",
        "rowwise" / `tpu_kernels.rowwise(*reduced_dims)`, a function giving
        strategies as `torch.distributed.tensor.experimental.register_sharding`
        takes, or "derived" (read off a Pallas kernel, verified at `examples`
        first); registered for the op and its backward op. Without one, DTensor
        arguments raise an error saying how to declare it.
      sharding_examples: a function returning concrete calls [(args, kwargs), ...]
        (torch tensors with valid values) for the sharding simulation
        (`tpu_kernels.testing.assert_sharding_rule`, `tpu-kernels check --sharding`)
        when random values at the examples' shapes would not do (indices, group
        sizes); by default the examples, shrunk, with random values.
      buckets: bounded dynamism (docs/buckets.md): {argument or output name: {dim:
        tpu_kernels.multiple_of(n), powers_of_two(n) or buckets_of([sizes])}}; the device
        kernels pad those dims up to the bucket (one executable per bucket) and slice
        the outputs back. Declare only dims the kernel treats independently (rows), or
        a reduced dim with a neutral pad value and `length`.
      length: with `buckets`, an optional tensor parameter (default None) that
        receives the true length as an int32 scalar when the op pads.
    """

    outputs: Sequence[str] | None = None
    residuals: Sequence[str] = ()
    mutates_args: Sequence[str] = ()
    backward: str | None = None
    reference: Callable | None = None
    check_reference: Any = None  # tolerance.Reference | Callable | None
    cache_size: int = 256
    noncontiguous: str = "copy"
    tags: Sequence[torch.Tag] = ()
    examples: Callable[[], Sequence[tuple[tuple, dict]]] | None = None
    tune: Any = None  # {name: [candidates]} or [{name: value, ...}, ...]
    tune_key: Callable[..., tuple] | None = None
    cost: Callable[..., float] | None = None
    autotune: bool = False
    float_only: Sequence[str] = ()
    visible_kernel: Any = None  # a helion.Kernel, or a JAX function for a JAX body
    autocast: str = "keep"
    sharding: Any = None
    sharding_examples: Callable[[], Sequence[tuple[tuple, dict]]] | None = None
    buckets: Any = None  # {name: {dim: Bucketing}}, or a backward op's inherited buckets.Plan
    length: str | None = None

    @classmethod
    def of(cls, where: str, options: dict[str, Any]) -> OpOptions:
        """The options from keywords, or a TypeError naming the unknown ones and the known."""
        unknown = sorted(set(options) - NAMES)
        if unknown:
            raise TypeError(
                f"{where}: unknown option(s) {', '.join(unknown)}; the options are {', '.join(sorted(NAMES))}."
            )
        for name in ("examples", "sharding_examples"):
            value = options.get(name)
            if value is not None and not callable(value):
                # a list given directly would fail much later, inside `tpu-kernels check`,
                # as "'list' object is not callable"
                raise TypeError(
                    f"{where}: option {name}= must be a function returning [(args, kwargs), ...] "
                    f"(e.g. {name}=lambda: [((x,), {{}})]), got {type(value).__name__}."
                )
        return cls(**options)


NAMES = frozenset(f.name for f in dataclasses.fields(OpOptions))


def keyword_parameters() -> list[inspect.Parameter]:
    """The options as keyword-only parameters, for the signatures `help()` shows."""
    hints = {f.name: f.type for f in dataclasses.fields(OpOptions)}
    return [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name])
        for f in dataclasses.fields(OpOptions)
    ]
