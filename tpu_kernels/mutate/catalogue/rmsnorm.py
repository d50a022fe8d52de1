"""rmsnorm's mutants (tpu_kernels/kernels/rmsnorm/pallas.py): eps, the float32 statistics, the
residual, the backward's partial row block and dw."""

from __future__ import annotations

from tpu_kernels.mutate.catalogue.base import (
    RMSNORM,
    T_RMSNORM,
    T_VMEM_MODELS,
    Mutation,
    _check,
    family_mutants,
)

_rmsnorm = family_mutants(RMSNORM, T_RMSNORM, "rmsnorm")


MUTANTS: tuple[Mutation, ...] = (
    _rmsnorm(
        "rmsnorm-residual-in-input-dtype",
        "jax.ShapeDtypeStruct((rows, 1), _acc(x.dtype))),",
        "jax.ShapeDtypeStruct((rows, 1), x.dtype)),",
        "inv_rms saved in bf16/f16: the backward gets 1/rms rounded to 8 bits",
    ),
    _rmsnorm(
        "rmsnorm-dropped-eps",
        "r = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)",
        "r = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True))",
        "eps dropped in the kernel: wrong for small rows, inf for a zero row",
    ),
    _rmsnorm(
        "rmsnorm-forward-low-precision",
        "    acc = _acc(y_ref.dtype)",
        "    acc = y_ref.dtype",
        "forward statistics and scaling in the input's bf16/f16",
    ),
    _rmsnorm(
        "rmsnorm-backward-low-precision",
        "    acc = _acc(dx_ref.dtype)",
        "    acc = dx_ref.dtype",
        "backward arithmetic in the input's bf16/f16",
    ),
    _rmsnorm(
        "rmsnorm-dw-partials-in-input-dtype",
        "jax.ShapeDtypeStruct((n_blocks, 1, d), _acc(x.dtype)),",
        "jax.ShapeDtypeStruct((n_blocks, 1, d), x.dtype),",
        "weight-gradient partial sums rounded to bf16/f16 before they are added",
    ),
    _rmsnorm(
        "rmsnorm-backward-forgets-weight",
        "    g = dy * w\n",
        "    g = dy\n",
        "dx computed without the weight",
    ),
    _rmsnorm(
        "rmsnorm-dw-without-inv-rms",
        "    part = dy * xhat\n",
        "    part = dy * x\n",
        "dw summed over x instead of the normalised x",
    ),
    _rmsnorm(
        "rmsnorm-padding-not-zeroed",
        "    if tail:\n",
        "    if False:\n",
        "the partial last block's rows past the array (whatever the edge's buffer holds) are summed into dw",
    ),
    _rmsnorm(
        "rmsnorm-residual-index-off-by-one",
        "out_specs=(row_spec, pl.BlockSpec((br, 1), lambda i: (i, 0))),",
        "out_specs=(row_spec, pl.BlockSpec((br, 1), lambda i: (i + 1, 0))),",
        "inv_rms written one row block late: block 0 never written, the last past the end",
    ),
    Mutation(
        "rmsnorm-backward-temporaries-undercounted",
        RMSNORM,
        "BACKWARD = RowFootprint(blocks=3, temporaries=5, columns=1, weight=True)",
        "BACKWARD = RowFootprint(blocks=3, temporaries=3, columns=1, weight=True)",
        "the backward's VMEM need counts 3 float32 temporaries of the 5 its body keeps live: bf16 "
        "[8192, 4096] asks for a 20 MiB scoped limit where 5 ask for 25, and the v5e allocated more "
        "than it counts for 15 of the body's refusals",
        T_VMEM_MODELS,
        check=_check("rmsnorm"),
    ),
)
