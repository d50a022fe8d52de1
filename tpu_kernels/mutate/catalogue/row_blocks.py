"""Mutants of the row kernels' shared block helper (tpu_kernels/kernels/_blocks.py): each is run
against all three row kernels' tests."""

from __future__ import annotations

from tpu_kernels.mutate.catalogue.base import (
    BLOCKS,
    FAST,
    T_ELEMENTWISE,
    T_RMSNORM,
    T_SOFTMAX,
    T_VMEM_MODELS,
    Mutation,
    _check,
    family_mutants,
)

# the shared helper: all three row kernels' tests
_blocks = family_mutants(BLOCKS, T_SOFTMAX + T_RMSNORM + T_ELEMENTWISE, "(softmax|rmsnorm|scale_add)")


MUTANTS: tuple[Mutation, ...] = (
    Mutation(
        "softmax-oversized-default-block",
        BLOCKS,
        "MIN_STEPS = 64",
        "MIN_STEPS = 1",
        "default row blocks without the 64-step floor: softmax's blocks on bf16[4096, 4096] quadruple, "
        "and a few-step grid loses its first read and last write to the pipeline's ends",
        T_SOFTMAX,
        test_filter=FAST,
        check=_check("softmax"),
    ),
    Mutation(
        "row-limit-not-raised",
        BLOCKS,
        "return _vmem.compiler_params(semantics, footprint.need(block_rows, cols, itemsize, chunk))",
        "return _vmem.compiler_params(semantics, 0)",
        "row kernels never raise Mosaic's scoped VMEM limit: default blocks sized past the 12 MiB budget "
        "(rmsnorm's backward in bf16 at [8192, 4096], 16 MiB with its float32 temporaries) compile "
        "against the 16 MiB default, where 256-row blocks of it did not compile on a v5e",
        ("tests/kernels/test_vmem_defaults.py",),
        test_filter="temporaries or raise",
        check=_check("rmsnorm"),
    ),
    Mutation(
        "row-default-under-its-floor",
        BLOCKS,
        "    if br * cols * itemsize < BLOCK_BYTES_MIN:\n        # rounded",
        "    if False:\n        # rounded",
        "the default row block rounded down under its 512 KiB floor: 16 and 32 rows at [1300, 5120] "
        "float32 and [2793, 5120] bf16, where rmsnorm's backward ran up to 1.12x slower than the doubled block",
        ("tests/kernels/test_vmem_defaults.py", "tests/test_chip_drawn.py"),
        test_filter="stays_near or within_five",
        check=_check("rmsnorm"),
    ),
    _blocks(
        "row_block-no-rounding",
        "return max(SUBLANES, target // SUBLANES * SUBLANES)",
        "return max(SUBLANES, target)",
        "block_rows not rounded to a multiple of 8: Mosaic rejects (100, cols) blocks",
    ),
    _blocks(
        "row_block-target-when-few-rows",
        "    if rows <= target:\n        return rows",
        "    if rows <= target:\n        return target",
        "a block taller than the array when rows < block_rows (illegal unless a multiple of 8)",
    ),
    _blocks(
        "require_float-disabled",
        "        if not jnp.issubdtype(a.dtype, jnp.floating):",
        "        if False:",
        "integer inputs silently rounded through float32 instead of refused",
    ),
    Mutation(
        "row-footprint-column-unpadded",
        BLOCKS,
        "residual = 2 * self.columns * _vmem.padded_rows(block_rows, 4) * 128 * 4",
        "residual = 2 * self.columns * _vmem.padded_rows(block_rows, 4) * 4",
        "a (rows, 1) float32 column counted without its 128-lane padding: rmsnorm's (128, 1) inv_rms "
        "is 1 KiB to the kernel's model, 128 KiB to the check and to Mosaic",
        T_VMEM_MODELS,
        check=_check("rmsnorm"),
    ),
)
