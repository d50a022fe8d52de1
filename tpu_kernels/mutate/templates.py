"""The templates' mutation catalogue: realistic bugs in the kernels `tpu-kernels new` generates.

Every (template, backend) pair is rendered into one folder (`render`), as a user would get it,
and each mutant is one textual edit of a generated file, caught by the generated tests (the
opcheck and torch.compile parity tests left out, as in the shipped catalogue) or by
`tpu-kernels check` of the generated package. `{{name}}` in a mutant's text stands for the
rendered kernel's name.

    python -m tpu_kernels.mutate --templates            # the whole catalogue
    python -m tpu_kernels.mutate --templates --only 'flash_attention-*'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tpu_kernels.mutate.catalogue import FAST, Mutation

NAMESPACE = "tpu_kernels_mutate"


@dataclass(frozen=True)
class TemplateMutant:
    template: str
    backend: str
    kind: str
    file: str  # in the generated package: "pallas.py", "helion_kernel.py", "reference.py"
    old: str  # found exactly once in the rendered file ({{name}}: the kernel's name)
    new: str
    why: str
    races: bool = False  # also `check --races`

    @property
    def id(self) -> str:
        return f"{self.template}-{self.backend}-{self.kind}"


def kernel_name(template: str, backend: str) -> str:
    """The name a variant is rendered under: a package nothing else imports."""
    return f"mutant_{template}_{backend}"


def _p(
    template: str, kind: str, old: str, new: str, why: str, file: str = "pallas.py", **kw
) -> TemplateMutant:
    return TemplateMutant(template, "pallas", kind, file, old, new, why, **kw)


def _h(
    template: str, kind: str, old: str, new: str, why: str, file: str = "helion_kernel.py"
) -> TemplateMutant:
    return TemplateMutant(template, "helion", kind, file, old, new, why)


TEMPLATES: tuple[TemplateMutant, ...] = (
    # ---- elementwise, Pallas ----
    _p(
        "elementwise",
        "low-precision",
        "acc = jnp.promote_types(o_ref.dtype, jnp.float32)",
        "acc = o_ref.dtype",
        "alpha * x + y in the input's bf16/f16: alpha * x rounded before the add",
    ),
    _p(
        "elementwise",
        "result-dtype-from-x",
        "dtype = jnp.result_type(x, y)",
        "dtype = x.dtype",
        "the result takes x's dtype: bf16 x + f32 y returns bf16 (torch: f32)",
    ),
    _p(
        "elementwise",
        "floor-grid",
        "grid=(pl.cdiv(rows, br),),",
        "grid=(rows // br,),",
        "floor instead of ceil: the last partial row block is never computed",
    ),
    _p(
        "elementwise",
        "block-ignores-itemsize",
        "BLOCK_BYTES // (cols * itemsize)",
        "BLOCK_BYTES // cols",
        "the default block counts elements as bytes: 2x VMEM per step in bf16, 4x in float32",
    ),
    _p(
        "elementwise",
        "block-not-rounded",
        "return max(SUBLANES, target // SUBLANES * SUBLANES)",
        "return max(SUBLANES, target)",
        "block_rows not rounded to a multiple of 8: Mosaic rejects (12, cols) blocks",
    ),
    _p(
        "elementwise",
        "backward-forgets-alpha",
        "return (alpha * x.astype(acc) + y.astype(acc)).astype(dtype)",
        "return (x.astype(acc) + y.astype(acc)).astype(dtype)",
        "the JAX reference the backward is derived from drops alpha: d/dx is g, not alpha * g",
        file="reference.py",
    ),
    # ---- elementwise, Helion ----
    _h(
        "elementwise",
        "result-dtype-from-x",
        "dtype=torch.promote_types(x.dtype, y.dtype),",
        "dtype=x.dtype,",
        "the result takes x's dtype: bf16 x + f32 y returns bf16 (torch: f32)",
    ),
    _h(
        "elementwise",
        "low-precision",
        "acc = alpha * x[tile_m, tile_n].to(torch.float32) + y[tile_m, tile_n].to(torch.float32)",
        "acc = alpha * x[tile_m, tile_n] + y[tile_m, tile_n]",
        "the tile's arithmetic in the input's bf16: alpha * x rounded before the add",
    ),
    _h(
        "elementwise",
        "oversized-tile",
        "BLOCK_ROWS = 64 ",
        "BLOCK_ROWS = 512 ",
        "512-row tiles: 8x the VMEM per grid step",
    ),
    _h(
        "elementwise",
        "backward-forgets-alpha",
        "return (alpha * x.astype(acc) + y.astype(acc)).astype(dtype)",
        "return (x.astype(acc) + y.astype(acc)).astype(dtype)",
        "the JAX reference the backward is derived from drops alpha: d/dx is g, not alpha * g",
        file="reference.py",
    ),
    # ---- row_reduction, Pallas ----
    _p(
        "row_reduction",
        "block-ignores-itemsize",
        "BLOCK_BYTES // (d * itemsize)",
        "BLOCK_BYTES // d",
        "the default block counts elements as bytes: 2x VMEM per step in bf16, 4x in float32",
    ),
    _p(
        "row_reduction",
        "residual-in-input-dtype",
        "jax.ShapeDtypeStruct((rows, 1), _acc(x.dtype)),",
        "jax.ShapeDtypeStruct((rows, 1), x.dtype),",
        "inv_rms saved in bf16/f16: the backward gets 1/rms rounded to 8 bits",
    ),
    _p(
        "row_reduction",
        "dropped-eps",
        "r = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)",
        "r = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True))",
        "eps dropped in the kernel: wrong for small rows, inf for a zero row",
    ),
    _p(
        "row_reduction",
        "forward-low-precision",
        "    acc = _acc(y_ref.dtype)",
        "    acc = y_ref.dtype",
        "forward statistics and scaling in the input's bf16/f16",
    ),
    _p(
        "row_reduction",
        "backward-low-precision",
        "    acc = _acc(dx_ref.dtype)",
        "    acc = dx_ref.dtype",
        "backward arithmetic in the input's bf16/f16",
    ),
    _p(
        "row_reduction",
        "dw-partials-in-input-dtype",
        "jax.ShapeDtypeStruct((n_blocks, 1, d), _acc(x.dtype)),",
        "jax.ShapeDtypeStruct((n_blocks, 1, d), x.dtype),",
        "weight-gradient partial sums rounded to bf16/f16 before they are added",
    ),
    _p(
        "row_reduction",
        "dw-in-input-dtype",
        "dw = dw_parts.sum(axis=(0, 1)).astype(weight.dtype)",
        "dw = dw_parts.sum(axis=(0, 1)).astype(x.dtype)",
        "the weight gradient rounded to x's dtype: a float32 weight on bf16 x gets a bf16 gradient",
    ),
    _p(
        "row_reduction",
        "backward-forgets-weight",
        "    g = dy * w\n",
        "    g = dy\n",
        "dx computed without the weight",
    ),
    _p(
        "row_reduction",
        "padding-not-zeroed",
        "if _symbolic(pad) or pad:",
        "if False:",
        "the last block's padding rows (whatever memory holds) are summed into dw",
    ),
    _p(
        "row_reduction",
        "residual-index-off-by-one",
        "out_specs=(row_spec, pl.BlockSpec((br, 1), lambda i: (i, 0))),",
        "out_specs=(row_spec, pl.BlockSpec((br, 1), lambda i: (i + 1, 0))),",
        "inv_rms written one row block late: block 0 never written, the last past the end",
    ),
    _p(
        "row_reduction",
        "y-dtype-promoted",
        "jax.ShapeDtypeStruct((rows, d), x.dtype),",
        "jax.ShapeDtypeStruct((rows, d), jnp.result_type(x, weight)),",
        "y promoted with the weight's dtype: bf16 x with a float32 weight gives float32 (torch: bf16)",
    ),
    # ---- row_reduction, Helion ----
    _h(
        "row_reduction",
        "dropped-eps",
        "r = torch.rsqrt(torch.mean(xf * xf, dim=-1) + eps)",
        "r = torch.rsqrt(torch.mean(xf * xf, dim=-1))",
        "eps dropped: wrong for small rows, inf for a zero row",
    ),
    _h(
        "row_reduction",
        "forward-low-precision",
        "xf = x[tile_m, :].to(torch.float32)",
        "xf = x[tile_m, :]",
        "forward statistics in the input's bf16",
    ),
    _h(
        "row_reduction",
        "residual-in-input-dtype",
        "inv_rms = torch.empty([rows], dtype=torch.float32, device=x.device)",
        "inv_rms = torch.empty([rows], dtype=x.dtype, device=x.device)",
        "inv_rms saved in bf16: the backward gets 1/rms rounded to 8 bits",
    ),
    _h(
        "row_reduction",
        "backward-forgets-weight",
        "g = dy * weight[tile_d].to(torch.float32)",
        "g = dy",
        "dx computed without the weight",
    ),
    _h(
        "row_reduction",
        "dx-drops-mean-term",
        "(r[:, None] * (g - xhat * c[:, None]))",
        "(r[:, None] * g)",
        "dx forgets the -xhat * mean(g * xhat) term",
    ),
    _h(
        "row_reduction",
        "dw-in-input-dtype",
        "grad_w = torch.empty([d], dtype=weight.dtype, device=x.device)",
        "grad_w = torch.empty([d], dtype=x.dtype, device=x.device)",
        "the weight gradient in x's dtype: a float32 weight on bf16 x gets a bf16 gradient",
    ),
    _h(
        "row_reduction",
        "y-dtype-promoted",
        "y = torch.empty_like(x)",
        "y = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)",
        "y promoted with the weight's dtype: bf16 x with a float32 weight gives float32 (torch: bf16)",
    ),
    _h(
        "row_reduction",
        "oversized-tile",
        "BLOCK_ROWS = 128 ",
        "BLOCK_ROWS = 1024 ",
        "1024-row tiles: 8x the VMEM per grid step",
    ),
    # ---- matmul, Pallas ----
    _p(
        "matmul",
        "parallel-k",
        '("parallel", "parallel", "arbitrary")',
        '("parallel", "parallel", "parallel")',
        "the k (accumulation) axis marked parallel: a cross-core race on two-core chips",
        races=True,
    ),
    _p(
        "matmul",
        "no-preferred-element-type",
        "jnp.dot(a, b, preferred_element_type=acc_ref.dtype)",
        "jnp.dot(a, b)",
        "each k tile's partial product rounded to bf16/f16 before accumulation",
    ),
    _p(
        "matmul",
        "transposed-no-preferred-element-type",
        "jax.lax.dot_general(a, b, dims, preferred_element_type=acc_ref.dtype)",
        "jax.lax.dot_general(a, b, dims)",
        "the backward's partial products (an operand read transposed) rounded to bf16/f16",
    ),
    _p(
        "matmul",
        "low-precision-accumulator",
        "scratch_shapes=[pltpu.VMEM((bm, bn), acc)] if acc != a.dtype else [],",
        "scratch_shapes=[pltpu.VMEM((bm, bn), a.dtype)] if acc != a.dtype else [],",
        "the VMEM accumulator in the input's dtype",
    ),
    _p(
        "matmul",
        "b-index-off-by-one",
        "b_spec = pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))",
        "b_spec = pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j + 1))",
        "b's column block one to the right",
    ),
    _p(
        "matmul",
        "transposed-a-index-swapped",
        "a_spec = pl.BlockSpec((bk, bm), lambda i, j, kk: (kk, i))",
        "a_spec = pl.BlockSpec((bk, bm), lambda i, j, kk: (i, kk))",
        "dB = A^T @ dC reads A's block at (i, kk) as if A were already transposed",
    ),
    _p(
        "matmul",
        "init-at-wrong-step",
        "@pl.when(k == 0)",
        "@pl.when(k == 1)",
        "the accumulator zeroed at the second k step (the first partial is lost)",
    ),
    _p(
        "matmul",
        "store-too-early",
        "@pl.when(k == n_k - 1)",
        "@pl.when(k == 0)",
        "the output written after the first k tile only",
    ),
    _p(
        "matmul",
        "mixed-dtypes-accepted",
        "    if a.dtype != b.dtype:\n",
        "    if False:\n",
        "bf16 a @ f32 b accepted (torch refuses): the result silently rounded to a's dtype",
    ),
    _p(
        "matmul",
        "oversized-default-block",
        "return (1024, 2048, 512) if itemsize <= 2 else (2048, 1024, 256)",
        "return (2048, 2048, 512) if itemsize <= 2 else (2048, 1024, 256)",
        "2048-row default blocks: about twice the VMEM per grid step, still under the cap",
    ),
    _p(
        "matmul",
        "vmem-limit-not-raised",
        "    if need > VMEM_BUDGET:\n",
        "    if False:\n",
        "the default blocks (22 MiB of buffers in bf16) under v5e's 16 MiB default scoped limit",
    ),
    # ---- matmul, Helion ----
    _h(
        "matmul",
        "tiles-not-upcast",
        "a_tile = a[tile_m, tile_k].to(torch.float32)\n            b_tile = b[tile_k, tile_n].to(torch.float32)",
        "a_tile = a[tile_m, tile_k]\n            b_tile = b[tile_k, tile_n]",
        "each k tile's product in the inputs' bf16, rounded before it is accumulated",
    ),
    _h(
        "matmul",
        "result-dtype-from-a",
        "dtype=torch.promote_types(a.dtype, b.dtype)",
        "dtype=a.dtype",
        "the result takes a's dtype: bf16 a @ f32 b returns bf16",
    ),
    _h(
        "matmul",
        "accumulator-overwritten",
        "acc = acc + torch.matmul(a_tile, b_tile)",
        "acc = torch.matmul(a_tile, b_tile)",
        "each k tile replaces the sum instead of adding to it: only the last K tile counts",
    ),
    _h(
        "matmul",
        "oversized-tile",
        "BLOCK_M = 256 ",
        "BLOCK_M = 2048 ",
        "2048-row tiles: about 5x the VMEM per grid step",
    ),
    _h(
        "matmul",
        "reference-dtype-from-a",
        "dtype = jnp.result_type(a, b)",
        "dtype = a.dtype",
        "the JAX reference the backward is derived from rounds to a's dtype: wrong mixed-dtype gradients",
        file="reference.py",
    ),
    # ---- flash_attention, Pallas ----
    _p(
        "flash_attention",
        "causal-skip-first-row",
        "return (k_start <= q_start + block_q - 1) if causal else True",
        "return (k_start <= q_start) if causal else True",
        "the causal block skip tests the q block's first row, not its last: with block_q > block_k "
        "kv blocks that the block's lower rows see are skipped",
    ),
    _p(
        "flash_attention",
        "last-kv-index-first-row",
        "return (i * block_q + block_q - 1) // block_k",
        "return (i * block_q) // block_k",
        "the forward's kv index map repeats the block of the q block's first row: needed kv blocks "
        "are never copied in when block_q > block_k",
    ),
    _p(
        "flash_attention",
        "first-q-index-rounds-up",
        "return (j * block_k) // block_q",
        "return -(-(j * block_k) // block_q)",
        "the dK/dV kernel's q index map starts at the rounded-up q block: the first q block a kv "
        "block needs is replaced by the next when block_k < block_q",
    ),
    _p(
        "flash_attention",
        "causal-mask-strict",
        "s = jnp.where(cols <= rows, s, MASK)",
        "s = jnp.where(cols < rows, s, MASK)",
        "the causal mask hides the diagonal: a query no longer sees its own key",
    ),
    _p(
        "flash_attention",
        "acc-not-rescaled",
        "acc_sc[...] = _lanes(rescale, d) * acc_sc[...] + pv",
        "acc_sc[...] = acc_sc[...] + pv",
        "the online softmax's accumulator not rescaled when the running max grows",
    ),
    _p(
        "flash_attention",
        "l-not-rescaled",
        "l_sc[...] = rescale * l_sc[...] + jnp.sum(p, axis=-1, keepdims=True)",
        "l_sc[...] = l_sc[...] + jnp.sum(p, axis=-1, keepdims=True)",
        "the online softmax's running sum not rescaled when the running max grows",
    ),
    _p(
        "flash_attention",
        "lse-without-max",
        "lse_ref[...] = (m_sc[...] + jnp.log(total))[:, :1].astype(lse_ref.dtype)",
        "lse_ref[...] = jnp.log(total)[:, :1].astype(lse_ref.dtype)",
        "the log-sum-exp residual forgets the running max: the backward's probabilities are wrong",
    ),
    _p(
        "flash_attention",
        "dq-scale-dropped",
        "dq_ref[...] = (dq_sc[...] * sm_scale).astype(dq_ref.dtype)",
        "dq_ref[...] = dq_sc[...].astype(dq_ref.dtype)",
        "dq without the softmax scale",
    ),
    _p(
        "flash_attention",
        "dkv-init-at-wrong-step",
        "    @pl.when(i == 0)\n    def _init():\n        dk_sc[...]",
        "    @pl.when(i == 1)\n    def _init():\n        dk_sc[...]",
        "the dK/dV accumulators zeroed at the second q step: the first q block's share is lost",
    ),
    _p(
        "flash_attention",
        "parallel-kv-axis",
        '("parallel", "parallel", "parallel", "arbitrary")',
        '("parallel", "parallel", "parallel", "parallel")',
        "the accumulating (last) grid axis marked parallel: a cross-core race on two-core chips",
        races=True,
    ),
    _p(
        "flash_attention",
        "mixed-dtypes-accepted",
        "    if not q.dtype == k.dtype == v.dtype:",
        "    if False:",
        "bf16 q with f32 k, v accepted (torch refuses): scores of mixed precision, output in q's dtype",
    ),
    _p(
        "flash_attention",
        "oversized-default-block",
        "DEFAULT_BLOCKS = (1024, 512, 256, 128)",
        "DEFAULT_BLOCKS = (2048, 1024, 512, 256, 128)",
        "2048-row default blocks: every block, and the scores' float32 temporaries, 2-4x larger",
    ),
    _p(
        "flash_attention",
        "scores-low-precision",
        "(((1,), (1,)), ((), ())), preferred_element_type=_acc(q.dtype))",
        "(((1,), (1,)), ((), ())))",
        "q k^T without a float32 result type: scores rounded to bf16/f16 before the softmax",
    ),
)


def variants(mutants: tuple[TemplateMutant, ...] = TEMPLATES) -> list[tuple[str, str]]:
    """The (template, backend) pairs the mutants cover, in catalogue order."""
    return list(dict.fromkeys((m.template, m.backend) for m in mutants))


def mutation(m: TemplateMutant) -> Mutation:
    """The mutant as an edit of the rendered tree (`render`)."""
    name = kernel_name(m.template, m.backend)
    return Mutation(
        m.id,
        f"{name}/{m.file}",
        m.old.replace("{{name}}", name),
        m.new.replace("{{name}}", name),
        m.why,
        (f"tests/test_{name}.py",),
        test_filter=FAST,
        check=(name,),
        races=m.races,
    )


def render(dest: Path, pairs: list[tuple[str, str]] | None = None) -> Path:
    """Every (template, backend) pair of the catalogue rendered into `dest`, as
    `tpu-kernels new` writes it; returns `dest`."""
    from tpu_kernels import scaffold

    for template, backend in pairs or variants():
        scaffold.new(
            kernel_name(template, backend), template, backend=backend, dest=dest, namespace=NAMESPACE
        )
    return dest


def rendered_text(m: TemplateMutant) -> str:
    """The generated file a mutant edits, rendered in memory (no file is written)."""
    from tpu_kernels import scaffold

    name = kernel_name(m.template, m.backend)
    files = scaffold.plan(name, m.template, backend=m.backend, dest=Path("/nonexistent"), namespace=NAMESPACE)
    return files[Path("/nonexistent") / name / m.file]
