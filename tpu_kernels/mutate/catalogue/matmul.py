"""matmul's mutants (tpu_kernels/kernels/matmul/pallas.py, blocks.py and gated.py): the
accumulator, the index maps, the partial blocks and the masked K tail (forward and the
transposed backward), the default blocks' cost model; the gated kernels' gate, its derivative,
their masks and index maps, and their VMEM need."""

from __future__ import annotations

from tpu_kernels.mutate.catalogue.base import (
    MATMUL,
    MATMUL_BLOCKS,
    T_MATMUL,
    T_MATMUL_BLOCKS,
    Mutation,
    _check,
    family_mutants,
)

_matmul = family_mutants(MATMUL, T_MATMUL, "matmul")
GATED, T_GATED = "tpu_kernels/kernels/matmul/gated.py", ("tests/kernels/test_matmul_gated.py",)
WITHOUT_TORCH_OP = (GATED,)
"""Kernel files whose functions are no torch op yet: their mutants name no `tpu-kernels check`."""


def _gated(id: str, old: str, new: str, why: str) -> Mutation:
    """A mutant of matmul's gated kernels: JAX functions without a torch op, so no
    `tpu-kernels check` (it lowers torch ops); their own tests judge them, less the property
    test, whose shrinking of a failure compiles a kernel per example (minutes, where the fixed
    shapes fail in seconds)."""
    return Mutation(id, GATED, old, new, why, T_GATED, test_filter="not match_float64")


T_ADD = ("tests/kernels/test_matmul_add.py",)


def _add(id: str, file: str, old: str, new: str, why: str) -> Mutation:
    """A mutant of the residual epilogue (`matmul_add`, `swiglu_matmul_add`): JAX functions
    without a torch op, judged by their own fixed-shape tests (not the property test, as
    `_gated`'s)."""
    return Mutation(id, file, old, new, why, T_ADD, test_filter="not any_shape")


MUTANTS: tuple[Mutation, ...] = (
    _add(
        "matmul-add-one-step-drops-c",
        MATMUL,
        "o_ref[...] = (product if c_ref is None else product + c_ref[...].astype(acc)).astype(o_ref.dtype)",
        "o_ref[...] = product.astype(o_ref.dtype)",
        "a one-step product written without the addend: c lost wherever block_k covers K",
    ),
    _add(
        "matmul-add-accumulator-starts-from-zero",
        MATMUL,
        "acc_ref[...] = jnp.zeros_like(acc_ref) if c_ref is None else c_ref[...].astype(acc_ref.dtype)",
        "acc_ref[...] = jnp.zeros_like(acc_ref)",
        "the accumulator of several K steps started from zeros: c lost wherever K takes more than one block",
    ),
    _add(
        "gated-add-accumulator-starts-from-zero",
        GATED,
        "acc_ref[...] = jnp.zeros_like(acc_ref) if c_ref is None else c_ref[...].astype(acc_ref.dtype)",
        "acc_ref[...] = jnp.zeros_like(acc_ref)",
        "the gated product's accumulator started from zeros: the residual lost",
    ),
    Mutation(
        "matmul-tie-ignores-one-step-blocks",
        MATMUL_BLOCKS,
        "if bk == k and m >= MXU_ROWS:",
        "if False:",
        "the tie broken by the output block alone: the one-step blocks that ran faster at K up to "
        "the cap lose to wider several-step ones",
        T_MATMUL_BLOCKS,
        test_filter="one_step",
        check=_check("matmul"),
    ),
    Mutation(
        "matmul-one-step-price-keeps-the-accumulator",
        MATMUL_BLOCKS,
        "acc = ACC_S * max(bm, 8) * bn if gk > 1 else 0.0",
        "acc = ACC_S * max(bm, 8) * bn",
        "one-step blocks priced with an accumulator they do not have: the defaults at K up to the "
        "cap go back to several steps",
        T_MATMUL_BLOCKS,
        test_filter="one_step",
        check=_check("matmul"),
    ),
    _matmul(
        "matmul-parallel-k",
        '("parallel", "parallel", "arbitrary")',
        '("parallel", "parallel", "parallel")',
        "the k (accumulation) axis marked parallel: a cross-core race on two-core chips",
        races=True,
    ),
    _matmul(
        "matmul-no-preferred-element-type",
        "mosaic_precision.dot(a, b, preferred_element_type=acc_ref.dtype, contract=contract)",
        "mosaic_precision.dot(a, b, contract=contract)",
        "each k tile's partial product rounded to bf16/f16 before accumulation",
    ),
    _matmul(
        "matmul-low-precision-accumulator",
        "else [pltpu.VMEM((bm, bn), acc)],",
        "else [pltpu.VMEM((bm, bn), a.dtype)],",
        "the VMEM accumulator in the input's dtype",
    ),
    _matmul(
        "matmul-b-index-off-by-one",
        "b_spec = pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))",
        "b_spec = pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j + 1))",
        "b's column block one to the right",
    ),
    _matmul(
        "matmul-init-at-wrong-step",
        "@pl.when(k == 0)",
        "@pl.when(k == 1)",
        "the accumulator zeroed at the second k step (the first partial is lost)",
    ),
    _matmul(
        "matmul-store-too-early",
        "@pl.when(k == n_k - 1)\n        def _store():",
        "@pl.when(k == 0)\n        def _store():",
        "the output written after the first k tile only",
    ),
    _matmul(
        "matmul-block-not-checked",
        "    check_aligned(name, block, multiple)\n    if export.is_symbolic_dim(dim):",
        "    if export.is_symbolic_dim(dim):",
        "misaligned block sizes reach Mosaic instead of a clear error",
    ),
    _matmul(
        "matmul-k-tail-unmasked",
        "    if k_tail:\n",
        "    if False:\n",
        "a partial last K block used as it lies: the buffer's rows past K (whatever an earlier copy "
        "left there, NaN in the interpreter) enter the dot product",
    ),
    _matmul(
        "matmul-backward-tail-masked-along-the-kept-dim",
        "broadcasted_iota(jnp.int32, a.shape, contract[0]) < k_tail",
        "broadcasted_iota(jnp.int32, a.shape, 1) < k_tail",
        "the backward's grad_b reads a transposed (its rows are the summed dim) but masks a's tail "
        "along its columns: rows past M enter the sum, and valid columns are zeroed",
    ),
    _matmul(
        "matmul-grid-floored",
        "grid = (pl.cdiv(m, bm), pl.cdiv(n, bn), pl.cdiv(k, bk))",
        "grid = (m // bm, n // bn, k // bk)",
        "the grid rounded down: a partial edge block of M, N or K never runs",
    ),
    Mutation(
        "matmul-default-block-below-the-mxu",
        MATMUL_BLOCKS,
        "MIN_BLOCK = 256",
        "MIN_BLOCK = 128",
        "default blocks down to 128 wide: the MXU (256 wide from v6e on) runs under-filled",
        T_MATMUL,
        test_filter="mxu",
        check=_check("matmul"),
    ),
    Mutation(
        "matmul-blocks-step-cost-doubled",
        MATMUL_BLOCKS,
        "STEP_S = 0.235e-6",
        "STEP_S = 0.47e-6",
        "the cost model's per-step cost off its fit: the default blocks no longer follow the chip's sweeps",
        T_MATMUL_BLOCKS,
        check=_check("matmul"),
    ),
    _gated(
        "gated-sigmoid-without-the-half",
        "return 0.5 * (1.0 + jnp.tanh(0.5 * x))",
        "return 0.5 * (1.0 + jnp.tanh(x))",
        "the gradient's sigmoid as (1 + tanh(x)) / 2, the tanh identity misremembered: dgate and dup wrong",
    ),
    _gated(
        "gated-derivative-drops-the-product-term",
        "dg_ref[...] = (dh * u * s * (1.0 + g * (1.0 - s))).astype(dg_ref.dtype)",
        "dg_ref[...] = (dh * u * s).astype(dg_ref.dtype)",
        "silu's derivative taken as sigmoid(g) alone, without g * s * (1 - s)",
    ),
    _gated(
        "gated-tail-masked-before-the-gate-only-in-b",
        "a, b = _masked(a, contract[0], valid), _masked(b, contract[1], valid)",
        "b = _masked(b, contract[1], valid)",
        "the contraction's tail masked in the weight only: past K (or M, in the weight's gradient) the "
        "gate of whatever an edge buffer held enters the sum, NaN included",
    ),
    _gated(
        "gated-slice-takes-the-whole-tail",
        "valid = size if not tail else min(size, tail - start)",
        "valid = size if not tail else min(size, tail)",
        "a slice's valid entries counted from the block's start, not the slice's: the slice that "
        "straddles the tail is left unmasked past K (or M)",
    ),
    _gated(
        "gated-weight-gradient-reads-h-untransposed",
        "h_spec = pl.BlockSpec((wm, wk), lambda i, j, kk: (kk, i))",
        "h_spec = pl.BlockSpec((wm, wk), lambda i, j, kk: (i, kk))",
        "the weight gradient's gate and up blocks indexed as if stored [K, M]: wrong tiles of h",
    ),
    _gated(
        "gated-need-without-the-second-operand",
        "return (blocks.vmem_need(bm, bn, bk, itemsize, passes) + 2 * a * itemsize",
        "return (blocks.vmem_need(bm, bn, bk, itemsize, passes)",
        "the prologue's VMEM need without the up operand's double-buffered block: defaults that pass "
        "the scoped limit with it",
    ),
    Mutation(
        "matmul-blocks-tail-unpriced",
        MATMUL_BLOCKS,
        "gm, gn, gk = _cdiv(m, bm), _cdiv(n, bn), _cdiv(k, bk)",
        "gm, gn, gk = m / bm, n / bn, k / bk",
        "a partial edge block priced as a fraction of one: blocks that waste most of a tile look free",
        T_MATMUL_BLOCKS,
        check=_check("matmul"),
    ),
)

EPILOGUE_MUTANTS = frozenset(m.id for m in MUTANTS if m.tests == T_ADD)
"""Mutants of the residual epilogue (`matmul_add`, `swiglu_matmul_add`): functions that are no
torch op yet, though matmul's op shares pallas.py with one; their tests judge them alone."""
