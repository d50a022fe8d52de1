"""The shipped kernels' mutation catalogue: small, realistic kernel bugs, each one textual edit.

Every mutant names the tests that should catch it (the kernel's own test file) and the ops
`tpu-kernels check` lowers for it (checked for the smallest default scoped VMEM limit among
the chips the check targets, v5e's 16 MiB). Kinds follow issue #16's list: arithmetic or
accumulation in the input's low precision, softmax without max-subtraction, a residual in
the input's dtype, an oversized default block, a parallel accumulation axis, the shared
row-block helper's rounding, a dropped eps, a dot without preferred_element_type, off-by-one
index maps and grids, wrong scales and signs, dropped semantics; and (issue #23) a result that
takes one input's dtype where torch promotes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    id: str
    file: str  # relative to the repository root
    old: str  # found exactly once in the file
    new: str
    why: str  # the bug, in words
    tests: tuple[str, ...] = ()  # pytest arguments (files, node ids)
    test_filter: str | None = None  # pytest -k
    check: tuple[str, ...] | None = None  # `tpu-kernels check` arguments (modules, --filter)
    races: bool = False  # also `check --races`


K = "tpu_kernels/kernels/"
SOFTMAX, RMSNORM, ELEMENTWISE, MATMUL, BLOCKS = (
    K + "softmax/pallas.py",
    K + "rmsnorm/pallas.py",
    K + "scale_add/pallas.py",
    K + "matmul/pallas.py",
    K + "_blocks.py",
)
T_SOFTMAX, T_RMSNORM, T_ELEMENTWISE, T_MATMUL = (
    ("tests/kernels/test_softmax.py",),
    ("tests/kernels/test_rmsnorm.py",),
    ("tests/kernels/test_scale_add.py",),
    ("tests/kernels/test_matmul.py",),
)


# opcheck and torch.compile parity (the slowest tests, about a third of each file's time here)
# test the op's registration, not the kernel's arithmetic, and the Helion twins' tests
# (tests/kernels/base.py) never run the mutated Pallas file: left out of the campaign. Running
# fewer tests can only lose catches, so the score is a lower bound for the full files.
FAST = "not opcheck and not compile_fullgraph and not helion_twin"


def _check(family: str) -> tuple[str, ...]:
    return ("tpu_kernels.kernels", "--filter", f"^tpu_kernels::{family}")


def _softmax(id: str, old: str, new: str, why: str, **kw) -> Mutation:
    return Mutation(id, SOFTMAX, old, new, why, T_SOFTMAX, test_filter=FAST, check=_check("softmax"), **kw)


def _rmsnorm(id: str, old: str, new: str, why: str, **kw) -> Mutation:
    return Mutation(id, RMSNORM, old, new, why, T_RMSNORM, test_filter=FAST, check=_check("rmsnorm"), **kw)


def _elementwise(id: str, old: str, new: str, why: str, **kw) -> Mutation:
    return Mutation(
        id, ELEMENTWISE, old, new, why, T_ELEMENTWISE, test_filter=FAST, check=_check("scale_add"), **kw
    )


def _matmul(id: str, old: str, new: str, why: str, **kw) -> Mutation:
    return Mutation(id, MATMUL, old, new, why, T_MATMUL, test_filter=FAST, check=_check("matmul"), **kw)


def _blocks(id: str, old: str, new: str, why: str, **kw) -> Mutation:
    # The shared helper: all three row kernels' tests.
    return Mutation(
        id,
        BLOCKS,
        old,
        new,
        why,
        T_SOFTMAX + T_RMSNORM + T_ELEMENTWISE,
        test_filter=FAST,
        check=_check("(softmax|rmsnorm|scale_add)"),
        **kw,
    )


SHIPPED: tuple[Mutation, ...] = (
    # ---- softmax ----
    _softmax(
        "softmax-bf16-arithmetic",
        "x = x_ref[...].astype(_acc(o_ref.dtype))",
        "x = x_ref[...].astype(o_ref.dtype)",
        "forward arithmetic (exp, sum, divide) in the input's bf16/f16 instead of float32",
    ),
    _softmax(
        "softmax-no-max-subtraction",
        "e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))",
        "e = jnp.exp(x)",
        "exp of raw logits: overflows to inf (NaN output) above ~88.7 in float32",
    ),
    _softmax(
        "softmax-backward-bf16-arithmetic",
        "    acc = _acc(dx_ref.dtype)\n    y, dy = y_ref",
        "    acc = dx_ref.dtype\n    y, dy = y_ref",
        "backward arithmetic in the input's bf16/f16 instead of float32",
    ),
    _softmax(
        "softmax-backward-drops-the-sum",
        "(y * (dy - jnp.sum(dy * y, axis=-1, keepdims=True)))",
        "(y * dy)",
        "backward forgets the -sum(dy * y) term",
    ),
    _softmax(
        "softmax-sum-over-rows",
        "(e / jnp.sum(e, axis=-1, keepdims=True))",
        "(e / jnp.sum(e, axis=0, keepdims=True))",
        "normalises over the block's rows instead of the row",
    ),
    _softmax(
        "softmax-floor-grid",
        "grid=(pl.cdiv(rows, br),),",
        "grid=(rows // br,),",
        "floor instead of ceil: the last partial row block is never computed",
    ),
    _softmax(
        "softmax-oversized-default-block",
        "def softmax(x: jax.Array, *, block_rows: int = 256)",
        "def softmax(x: jax.Array, *, block_rows: int = 1024)",
        "1024-row default blocks: 32 MiB of VMEM per step on bf16[4096, 4096], above v5e's 16 MiB",
    ),
    _softmax(
        "softmax-backward-oversized-default-block",
        "grad_out: jax.Array, *, block_rows: int = 256)",
        "grad_out: jax.Array, *, block_rows: int = 1024)",
        "1024-row default backward blocks: 48 MiB of VMEM per step on bf16[4096, 4096]",
    ),
    _softmax(
        "softmax-no-dimension-semantics",
        "        compiler_params=parallel_rows(),\n        cost_estimate=cost(\n            flops_per_elem",
        "        cost_estimate=cost(\n            flops_per_elem",
        "grid left sequential: half of a two-core chip idle (a performance bug)",
    ),
    # ---- rmsnorm ----
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
        "jnp.sum(dy * xhat, axis=0, keepdims=True)",
        "jnp.sum(dy * x, axis=0, keepdims=True)",
        "dw summed over x instead of the normalised x",
    ),
    _rmsnorm(
        "rmsnorm-padding-not-zeroed",
        "if export.is_symbolic_dim(pad) or pad:",
        "if False:",
        "the last block's padding rows (whatever memory holds) are summed into dw",
    ),
    _rmsnorm(
        "rmsnorm-residual-index-off-by-one",
        "out_specs=(row_spec, pl.BlockSpec((br, 1), lambda i: (i, 0))),",
        "out_specs=(row_spec, pl.BlockSpec((br, 1), lambda i: (i + 1, 0))),",
        "inv_rms written one row block late: block 0 never written, the last past the end",
    ),
    # ---- scale_add ----
    _elementwise(
        "scale_add-low-precision",
        "acc = jnp.promote_types(o_ref.dtype, jnp.float32)",
        "acc = o_ref.dtype",
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
        "dy = _call(jnp.zeros_like(g), g, alpha, block_rows)",
        "dy = _call(jnp.zeros_like(g), g, 1.0, block_rows)",
        "d/dy forgets alpha",
    ),
    _elementwise(
        "scale_add-oversized-default-block",
        "alpha: float = 1.0, block_rows: int = 256)",
        "alpha: float = 1.0, block_rows: int = 2048)",
        "2048-row default blocks: 96 MiB of VMEM per step on bf16[4096, 4096]",
    ),
    _elementwise(
        "scale_add-unbroadcast-keepdims",
        "g.sum(axis=axes, keepdims=True)",
        "g.sum(axis=axes)",
        "the gradient of a broadcast size-1 dimension loses that dimension",
    ),
    # ---- matmul ----
    _matmul(
        "matmul-parallel-k",
        '("parallel", "parallel", "arbitrary")',
        '("parallel", "parallel", "parallel")',
        "the k (accumulation) axis marked parallel: a cross-core race on two-core chips",
        races=True,
    ),
    _matmul(
        "matmul-no-preferred-element-type",
        "jnp.dot(a_ref[...], b_ref[...], preferred_element_type=acc_ref.dtype)",
        "jnp.dot(a_ref[...], b_ref[...])",
        "each k tile's partial product rounded to bf16/f16 before accumulation",
    ),
    _matmul(
        "matmul-low-precision-accumulator",
        "scratch_shapes=[pltpu.VMEM((bm, bn), acc)],",
        "scratch_shapes=[pltpu.VMEM((bm, bn), a.dtype)],",
        "the VMEM accumulator in the input's dtype",
    ),
    _matmul(
        "matmul-b-index-off-by-one",
        "pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),",
        "pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j + 1)),",
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
        "@pl.when(k == n_k - 1)",
        "@pl.when(k == 0)",
        "the output written after the first k tile only",
    ),
    _matmul(
        "matmul-block-not-checked",
        "    check_aligned(name, block, multiple)\n    if export.is_symbolic_dim(dim):",
        "    if export.is_symbolic_dim(dim):",
        "misaligned block sizes reach Mosaic instead of a clear error",
    ),
    # ---- the shared row-block helper ----
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
)
