"""scale_add's mutants (tpu_kernels/kernels/scale_add/pallas.py): promotion, the scale, the index
maps."""

from __future__ import annotations

from tpu_kernels.mutate.catalogue.base import (
    ELEMENTWISE,
    T_ELEMENTWISE,
    Mutation,
    family_mutants,
)

_elementwise = family_mutants(ELEMENTWISE, T_ELEMENTWISE, "scale_add")


MUTANTS: tuple[Mutation, ...] = (
    _elementwise(
        "scale_add-low-precision",
        "    return jnp.promote_types(dtype, jnp.float32)",
        "    return dtype",
        "x + alpha * y in the input's bf16/f16: alpha * y rounded before the add",
    ),
    _elementwise(
        "scale_add-result-dtype-from-x",
        "dtype = jnp.result_type(x, y)",
        "dtype = x.dtype",
        "the result takes x's dtype: bf16 x + f32 y returns bf16 (torch: f32)",
    ),
    _elementwise(
        "scale_add-backward-wrong-scale",
        "dy = _scaled(g, alpha, block_rows)",
        "dy = _scaled(g, 1.0, block_rows)",
        "d/dy forgets alpha",
    ),
    _elementwise(
        "scale_add-oversized-default-block",
        "alpha: float = 1.0, block_rows: int | None = None)",
        "alpha: float = 1.0, block_rows: int | None = 2048)",
        "2048-row default blocks: 96 MiB of VMEM per step on bf16[4096, 4096]",
    ),
    _elementwise(
        "scale_add-unbroadcast-keepdims",
        "g.sum(axis=axes, keepdims=True)",
        "g.sum(axis=axes)",
        "the gradient of a broadcast size-1 dimension loses that dimension",
    ),
)
