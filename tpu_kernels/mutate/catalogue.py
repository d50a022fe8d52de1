"""The shipped kernels' mutation catalogue: small, realistic kernel bugs, each one textual edit.

Every mutant names the tests that should catch it (the kernel's own test file) and the ops
`tpu-kernels check` lowers for it (checked for the smallest default scoped VMEM limit among
the chips the check targets, v5e's 16 MiB). Kinds follow issue #16's list: arithmetic or
accumulation in the input's low precision, softmax without max-subtraction, a residual in
the input's dtype, an oversized default block, a parallel accumulation axis, the shared
row-block helper's rounding, a dropped eps, a dot without preferred_element_type, off-by-one
index maps and grids, wrong scales and signs, dropped semantics; (issue #23) a result that
takes one input's dtype where torch promotes; and (issue 59) the VMEM models' and block
searches' edges: a chunk search that misses 128-lane chunks, a backward's float32 temporaries
under-counted, a (rows, 1) column counted without its lane padding, a default matmul block
halved below the MXU.

`TOOLKIT` holds mutants of the machinery around the kernels (the on-disk cache's key and
reads, the eager shortcut, derived fakes, buckets, the benchmark's correctness verdict, the
torchtitan and Hugging Face integrations, the tuner and its tables, the chip names, the VMEM
check's buffers and limits): issue #39's ten survivors and the fresh edits of the run that
followed it, issue #46's survivors and faults, and issue 59's (the chip runner's error and speed
figures, its corpus and fit, the three-pass dot's tracing hook, the layer's gradient comparison).
They name tests only: `tpu-kernels check` judges kernels, not these.
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
MATMUL_BLOCKS, T_MATMUL_BLOCKS = K + "matmul/blocks.py", ("tests/kernels/test_matmul_blocks.py",)
T_SOFTMAX, T_RMSNORM, T_ELEMENTWISE, T_MATMUL = (
    ("tests/kernels/test_softmax.py",),
    ("tests/kernels/test_rmsnorm.py",),
    ("tests/kernels/test_scale_add.py",),
    ("tests/kernels/test_matmul.py",),
)
# issue 59: every 128-lane width's chunk; the row kernels' VMEM models against the check's and the chip's
T_CHUNKS, T_VMEM_MODELS = ("tests/kernels/test_softmax_chunks.py",), ("tests/kernels/test_vmem_models.py",)


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
        "    acc = _acc(o_ref.dtype)\n    if chunk",
        "    acc = o_ref.dtype\n    if chunk",
        "forward arithmetic (exp, sum, divide) in the input's bf16/f16 instead of float32",
    ),
    Mutation(
        "softmax-chunk-sum-not-rescaled",
        SOFTMAX,
        "total * jnp.exp(m - shift) + ",
        "total + ",
        "a wide row's online sum kept at the old max's scale when a later chunk raises the max",
        ("tests/kernels/test_vmem_defaults.py",),
        test_filter="chunk or wide",
        check=_check("softmax"),
    ),
    Mutation(
        "softmax-online-masked-max-unguarded",
        SOFTMAX,
        "shift = jnp.where(m_new == -jnp.inf, 0.0, m_new)",
        "shift = m_new",
        "the online max used as is while still -inf: a wide row whose first columns are all masked "
        "(-inf logits) becomes NaN",
        ("tests/kernels/test_vmem_defaults.py",),
        test_filter="masked",
        check=_check("softmax"),
    ),
    Mutation(
        "softmax-chunk-reads-the-first-chunk",
        SOFTMAX,
        "return pl.ds(pl.multiple_of(c * chunk, chunk), chunk)",
        "return pl.ds(0, chunk)",
        "every chunk of a wide row read from and written to the row's first columns (an offset dropped)",
        ("tests/kernels/test_vmem_defaults.py",),
        test_filter="chunk or wide",
        check=_check("softmax"),
    ),
    Mutation(
        "softmax-tail-left-out-of-the-stats",
        SOFTMAX,
        "    if tail:\n        m, total = _merged(m, total, _tail(x_ref, n, chunk, acc))\n",
        "",
        "a wide row's last, narrower chunk left out of its max and sum: its outputs pass 1 in total",
        T_CHUNKS,
        check=_check("softmax"),
    ),
    Mutation(
        "softmax-backward-tail-left-out-of-the-dot",
        SOFTMAX,
        "        s = s + jnp.sum(_tail(y_ref, n, chunk, acc) * _tail(dy_ref, n, chunk, acc), axis=-1, keepdims=True)\n",
        "        s = s\n",
        "the backward's sum(dy * y) misses a wide row's last, narrower chunk",
        T_CHUNKS,
        check=_check("softmax"),
    ),
    Mutation(
        "softmax-chunk-search-stops-at-two-lanes",
        SOFTMAX,
        "for lanes in range(CHUNK // 128, 0, -1)",
        "for lanes in range(CHUNK // 128, 1, -1)",
        "the chunk search stops at 2 lane groups: a row of 128 x p lanes, p a prime above 64, has no "
        "chunk, and softmax at [8, 8576] raises StopIteration while tracing",
        T_CHUNKS,
        check=_check("softmax"),
    ),
    _softmax(
        "softmax-no-max-subtraction",
        "e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))",
        "e = jnp.exp(x)",
        "exp of raw logits: overflows to inf (NaN output) above ~88.7 in float32",
    ),
    _softmax(
        "softmax-backward-bf16-arithmetic",
        "    acc = _acc(dx_ref.dtype)\n    if chunk",
        "    acc = dx_ref.dtype\n    if chunk",
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
    _softmax(
        "softmax-no-dimension-semantics",
        "        compiler_params=row_params(footprint, br, cols, itemsize, chunk=chunk),\n        cost_estimate=cost(\n            flops_per_elem",
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
    # ---- scale_add ----
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
    Mutation(
        "matmul-blocks-tail-unpriced",
        MATMUL_BLOCKS,
        "gm, gn, gk = _cdiv(m, bm), _cdiv(n, bn), _cdiv(k, bk)",
        "gm, gn, gk = m / bm, n / bn, k / bk",
        "a partial edge block priced as a fraction of one: blocks that waste most of a tile look free",
        T_MATMUL_BLOCKS,
        check=_check("matmul"),
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


# ---- the toolkit around the kernels (python -m tpu_kernels.mutate --toolkit) ----------------
# Each group names the test files that own the module, minus their slowest tests where others
# in the file catch every mutant of the group (the process-spawning and Inductor tests).
T_PROGRAM = ("tests/cache/test_program.py",)
T_BUILD = ("tests/cache/test_build.py",)
BUILD_FAST = "not two_processes_write_at_once and not run_time_state_reaches_every_later_process"
T_EAGER = (
    "tests/test_eager.py",
    "tests/test_eager_properties.py",
    "tests/test_eager_checks.py",
    "tests/tokamax/test_wrap.py",
)
T_FAKE = ("tests/test_fake.py",)
T_BUCKETS = ("tests/test_buckets.py",)
BUCKETS_FAST = "not inductor"
T_CORRECTNESS = ("tests/bench/test_correctness.py",)
CORRECTNESS_FAST = "not catalogues_wrong_kernels"
T_TITAN = ("tests/integrations/test_torchtitan.py",)
TITAN_FAST = "not five_steps"  # the training runs (one process, compile, 2 processes)
T_HF = ("tests/integrations/test_transformers.py",)
HF_FAST = "not inductor"
MEMORY = "tpu_kernels/runtime/cache/memory.py"
T_LOCK = (
    "tests/cache/test_lock.py",
    "tests/test_op.py::test_cache_builds_each_key_once_under_concurrent_calls",
)
T_PARALLEL = ("tests/tuning/test_parallel.py",)
PROGRAM, BUILD, STORE = (
    "tpu_kernels/runtime/cache/program.py",
    "tpu_kernels/runtime/cache/build.py",
    "tpu_kernels/runtime/cache/store.py",
)
EAGER, FAKE, BUCKETS = (
    "tpu_kernels/dispatch/eager.py",
    "tpu_kernels/dispatch/fake.py",
    "tpu_kernels/dispatch/buckets.py",
)
CORRECTNESS = "tpu_kernels/bench/correctness.py"
COMPARE = "tpu_kernels/verification/compare.py"  # the distances: normwise (the correctness column's) and element-wise
T_COMPARE = ("tests/test_checked.py", "tests/test_sharding_sim.py", "tests/test_testing.py")
TITAN = "tpu_kernels/integrations/torchtitan/modules.py"
HF_ATTENTION = "tpu_kernels/integrations/transformers/attention.py"
# the tuner and its tables (issue 46)
TUNER, TUNING = "tpu_kernels/tuner/", "tpu_kernels/tuning/"
SELECT, POINT, PREDICT = TUNER + "select.py", TUNER + "point.py", TUNER + "predict.py"
BODY = TUNER + "body.py"
LOOKUP, TABLE, CHIP = TUNING + "lookup.py", TUNING + "table.py", TUNING + "chip.py"
T_SELECT, T_CHIP = ("tests/tuning/test_select.py",), ("tests/tuning/test_chip.py",)
T_LOOKUP = ("tests/tuning/test_lookup.py",)
T_TUNER = ("tests/tuning/test_tuner.py", "tests/tuning/test_predict.py")
TUNER_FAST = "not helion and not shipped_kernel and not tokamax"  # the end-to-end runs of other tuners
T_TABLE = ("tests/tuning/test_table.py", *T_LOOKUP)
T_VMEM = (
    "tests/check/test_vmem_limits.py",
    "tests/check/test_semantics_and_limits.py::test_scoped_limits_per_generation",
)


T_VMEM_MODEL = ("tests/check/test_vmem_model.py", "tests/check/test_chip_corpus.py")


# issue 59: the chip runner (tpu_kernels/chip), its corpus, its fit, the three-pass dot's hook
CHIP_MEASURE, CHIP_RUN, CHIP_LAYER, CHIP_REPORT, CORPUS = (
    "tpu_kernels/chip/measure.py",
    "tpu_kernels/chip/run.py",
    "tpu_kernels/chip/layer.py",
    "tpu_kernels/chip/report.py",
    "tpu_kernels/chip/corpus.py",
)
CHIP_TUNING, MOSAIC = "bench/chip_tuning.py", "tpu_kernels/runtime/mosaic_precision.py"
T_CHIP_FIGURES = ("tests/test_chip_figures.py", "tests/test_chip.py")
T_CORPUS = ("tests/check/test_chip_corpus.py",)
T_CHIP_FIT = ("tests/tuning/test_chip_fit.py",)
T_MOSAIC = ("tests/test_mosaic_precision.py",)


def _toolkit(
    id: str, file: str, old: str, new: str, why: str, tests: tuple[str, ...], filter: str | None = None
):
    return Mutation(id, file, old, new, why, tests, test_filter=filter, check=None)


TOOLKIT: tuple[Mutation, ...] = (
    # ---- issue #39's ten survivors ----
    _toolkit(
        "cache-digest-skips-outputs",
        PROGRAM,
        '        for v in j.outvars:\n            self.atom(v, names, f"{where}.outvars")',
        "        pass",
        "two programs that differ only in what they return share a key: the second loads the first's",
        T_PROGRAM + T_BUILD,
        BUILD_FAST,
    ),
    # (cache-key-without-xla-flags left the catalogue: since JAX's compile options joined the key,
    # they carry XLA_FLAGS' debug options too, so dropping XLA_FLAGS alone changes no key; the
    # mutant was equivalent, and cache-key-without-compile-options covers the rule.)
    _toolkit(
        "cache-read-follows-links",
        STORE,
        '        os.O_RDONLY\n        | getattr(os, "O_NOFOLLOW", 0)\n',
        "        os.O_RDONLY\n",
        "an entry read through a symlink: a link to a real entry elsewhere is loaded",
        T_BUILD,
        BUILD_FAST,
    ),
    _toolkit(
        "buckets-pad-with-zero",
        BUCKETS,
        "            out = t.new_full(shape, b.pad)",
        "            out = t.new_full(shape, 0)",
        "padding holds 0 instead of the declared pad value: a -inf-padded row max returns 0s",
        T_BUCKETS,
        BUCKETS_FAST,
    ),
    _toolkit(
        "eager-try-all-keeps-int-for-float",
        EAGER,
        "        for i in self.floats:\n            if type(values[i]) is int:\n"
        "                if not -DOUBLE_OVERFLOW < values[i] < DOUBLE_OVERFLOW:\n                    return DECLINED\n"
        "                values = values[:i] + (float(values[i]),) + values[i + 1 :]\n",
        "",
        "try_all traces an int given for a float static: int32 where the dispatcher gives float32, "
        "and a later 2.0 reuses that entry",
        T_EAGER,
    ),
    _toolkit(
        "fake-cache-keyed-on-shapes-only",
        FAKE,
        "            out.append((tuple(v.shape), v.dtype))\n    return tuple(out)",
        "            out.append(tuple(v.shape))\n    return tuple(out)",
        "a bfloat16 meta call after a float32 one of the same shape gets float32",
        T_FAKE,
    ),
    _toolkit(
        "correctness-max-norm-over-2-norm",
        COMPARE,
        "        float(diff.max()) / max(scale_max, tiny),",
        "        float(diff.max()) / max(scale2, tiny),",
        "the max-norm error divided by the reference's 2-norm: one wrong element passes",
        T_CORRECTNESS,
        CORRECTNESS_FAST,
    ),
    _toolkit(
        "correctness-baseline-factor-100x",
        CORRECTNESS,
        "BASELINE_FACTOR = 4.0",
        "BASELINE_FACTOR = 400.0",
        "a candidate may be 400x less accurate than torch: a bfloat16 result 20% off passes",
        T_CORRECTNESS,
        CORRECTNESS_FAST,
    ),
    _toolkit(
        "torchtitan-rmsnorm-eps-none-1e-6",
        TITAN,
        "        eps = self.eps if self.eps is not None else torch.finfo(_compute_dtype(input.dtype)).eps",
        "        eps = self.eps if self.eps is not None else 1e-6",
        "RMSNorm(eps=None) with 1e-6, not nn.RMSNorm's machine epsilon: 30% off on small rows",
        T_TITAN,
        TITAN_FAST,
    ),
    _toolkit(
        "hf-attention-causal-decode-default",
        HF_ATTENTION,
        "    if is_causal and q_len > 1:",
        "    if is_causal:",
        "with no mask, a decode step's one query sees only the first key (sdpa: every key)",
        T_HF,
        HF_FAST,
    ),
    # ---- the fresh edits of the run after issue #39 (docs/mutation-testing.md) ----
    _toolkit(
        "cache-custom-jvp-body-skipped",
        PROGRAM,
        '"custom_jvp_call": frozenset({"jvp_jaxpr_fun", "jvp_jaxpr_thunk"}),',
        '"custom_jvp_call": frozenset({"jvp_jaxpr_fun", "jvp_jaxpr_thunk", "call_jaxpr"}),',
        "a custom_jvp function's body skipped like its derivative rule: two such kernels share a key",
        T_PROGRAM,
    ),
    _toolkit(
        "cache-literal-not-by-value",
        PROGRAM,
        '            self.put("literal")\n            self.aval(v.aval)\n            self.value(v.val, where)\n',
        '            self.put("literal")\n            self.aval(v.aval)\n',
        "literals keyed by type only: x * 2.0 and x * 3.0 share a key",
        T_PROGRAM,
    ),
    _toolkit(
        "cache-read-ignores-the-stated-size",
        STORE,
        "        if size != st.st_size or size > MAX_ENTRY_BYTES:",
        "        if size > MAX_ENTRY_BYTES:",
        "an entry longer than its header says is read to the header's length and loaded",
        T_BUILD,
        BUILD_FAST,
    ),
    _toolkit(
        "cache-entries-written-for-everyone",
        STORE,
        "        os.chmod(tmp, 0o644)",
        "        os.chmod(tmp, 0o666)",
        "entries written writable by everyone (whoever can write one runs code in every process)",
        T_BUILD,
        BUILD_FAST,
    ),
    # ---- issue 46's faults, each fixed ----
    _toolkit(
        "cache-shared-trusts-everyone",
        STORE,
        "    if st.st_mode & 0o002:  # trusted or not",
        "    if st.st_mode & 0o002 and not shared_trusted():  # trusted or not",
        "TPU_KERNELS_CACHE_TRUST=shared loads a 777 folder's and a 666 entry's executables",
        T_BUILD,
        BUILD_FAST,
    ),
    _toolkit(
        "cache-clear-follows-links",
        STORE,
        "        st = os.lstat(name, dir_fd=parent_fd)",
        "        st = os.stat(name, dir_fd=parent_fd)",
        "cache clear takes a planted link for the folder it points to",
        T_BUILD,
        BUILD_FAST,
    ),
    _toolkit(
        "cache-key-without-compile-options",
        BUILD,
        "        compile_options(),\n",
        "",
        "a process under JAX_OPTIMIZATION_LEVEL=O0 loads another process's optimised executable",
        T_BUILD,
        BUILD_FAST,
    ),
    _toolkit(
        "compare-inconclusive-called-ok",
        "tpu_kernels/bench/compare.py",
        "    if relative * (1 + threshold) < 1:",
        "    if False:",
        "a 5.4x slower op is ok beside a baseline that slowed 344x on a busy machine",
        ("tests/bench/test_compare.py",),
    ),
    _toolkit(
        "nested-tensor-let-through",
        "tpu_kernels/definition/signature.py",
        "            if value.is_nested:",
        "            if False:",
        "a nested tensor gets torch's dispatcher error, naming neither the op's argument nor the fix",
        ("tests/test_user_errors.py",),
    ),
    _toolkit(
        "fork-after-jax-not-checked",
        "tpu_kernels/runtime/devices/jax_exec.py",
        "        forks.check(self.op)",
        "        pass",
        "a DataLoader fork worker's first compile hangs forever",
        ("tests/test_forks.py",),
    ),
    _toolkit(
        "cache-sticky-folder-above-refused",
        STORE,
        "            if st.st_mode & 0o002 and not sticky:",
        "            if st.st_mode & 0o002:",
        "a world-writable folder above the cache refused even with the sticky bit (/tmp): no cache there",
        T_BUILD,
        BUILD_FAST,
    ),
    _toolkit(
        "eager-shortcut-takes-tensors-needing-grad",
        EAGER,
        "        or (grad and t.requires_grad)\n",
        "",
        "the shortcut runs a call whose inputs need gradients: the result has no grad_fn",
        T_EAGER,
    ),
    _toolkit(
        "eager-key-without-dtype",
        EAGER,
        "                key.append((shape, dtype))",
        "                key.append(shape)",
        "the shortcut keys an op with optional tensors on shapes only: never the executor's key, so "
        "every call misses the one-pass path (results stay right; the shortcut's saving is lost)",
        T_EAGER,
    ),
    _toolkit(
        "eager-one-pass-takes-non-contiguous",
        EAGER,
        "                if not t.is_contiguous():\n"
        "                    return executor(*args)  # the executor copies (or refuses) as the op says\n",
        "",
        "a non-contiguous tensor handed to the compiled entry as if contiguous",
        T_EAGER,
    ),
    _toolkit(
        "eager-int-defaults-made-float",
        EAGER,
        "        if type(args[i]) is int and (i < n or (kwargs and param_names[i] in kwargs)):",
        "        if type(args[i]) is int:",
        "an int default of a float static made a float, where the dispatcher passes it as written",
        T_EAGER,
    ),
    # the memo of an op's last call (issue 40): each thing the key holds, and the entry's life
    _toolkit(
        "eager-memo-ignores-statics",
        EAGER,
        "        if type(v) is not type(value) or v != value:",
        "        if type(v) is not type(value):",
        "the memo serves a call with another float static: x * 2 + y returned for alpha=3",
        T_EAGER,
    ),
    _toolkit(
        "eager-memo-ignores-generation",
        EAGER,
        "            or self._cache.generation != generation\n",
        "",
        "the memo runs an entry cache_clear() dropped (the tuner's new config never applies)",
        T_EAGER,
    ),
    _toolkit(
        "eager-memo-ignores-precision",
        EAGER,
        "            or _precision() != precision_\n",
        "",
        "the memo runs the entry traced at the old matmul precision after the setting changed",
        T_EAGER,
    ),
    _toolkit(
        "eager-memo-ignores-interpret-mode",
        EAGER,
        "            or self._mode() is not mode\n",
        "",
        "the memo runs the fast interpreter's entry inside interpret_mode('tpu')",
        T_EAGER,
    ),
    _toolkit(
        "eager-memo-takes-tensors-needing-grad",
        EAGER,
        "            or (t.requires_grad and grad)\n",
        "",
        "the memo runs a call whose inputs need gradients once grad mode is on: no grad_fn",
        T_EAGER,
    ),
    _toolkit(
        "eager-memo-ignores-conjugate-bit",
        EAGER,
        "            or t.is_conj()\n            or t.is_neg()\n            or (t.requires_grad and grad)\n",
        "            or t.is_neg()\n            or (t.requires_grad and grad)\n",
        "the memo hands a conjugate view's memory to the kernel unconjugated",
        T_EAGER,
    ),
    # a public function's argument check, left out only for the memo's call that passed it
    _toolkit(
        "eager-memo-skips-a-check-it-never-passed",
        EAGER,
        "            if memo is None or checked is None or memo[6] is not checked:",
        "            if memo is None or checked is None:",
        "a Tokamax public function skips its argument check after the op alone ran the call: "
        "arguments it refuses get a result",
        T_EAGER,
    ),
    _toolkit(
        "call-op-never-checks",
        "tpu_kernels/tokamax/wrap.py",
        "        check(values)\n",
        "        pass\n",
        "call_op runs the op without the public function's argument check",
        T_EAGER,
    ),
    _toolkit(
        "eager-memo-zero-sign",
        EAGER,
        "        if v == 0.0 and type(v) is float and _copysign(1.0, v) != _copysign(1.0, value):",
        "        if False:",
        "the memo serves alpha=-0.0 the 0.0 executable: x / -0.0 gives +inf",
        T_EAGER,
    ),
    _toolkit(
        "eager-memo-holds-records",
        EAGER,
        "tuple(None if r is None else weakref.ref(r) for r in records)",
        "tuple(None if r is None else (lambda r=r: r) for r in records)",
        "the memo holds the last call's views strongly: a dropped weight's storage stays alive",
        T_EAGER,
    ),
    _toolkit(
        "eager-key-negative-zero-is-zero",
        EAGER,
        "            key.append(NEGATIVE_ZERO)  # static_key's, inline: the hot path",
        "            key.append(v)",
        "alpha=-0.0 after alpha=0.0 runs the 0.0 executable on the shortcut: x / -0.0 gives +inf",
        T_EAGER,
    ),
    _toolkit(
        "static-key-negative-zero-is-zero",
        "tpu_kernels/definition/signature.py",
        "        return NEGATIVE_ZERO if v == 0.0 and math.copysign(1.0, v) < 0 else v",
        "        return v",
        "the executor's key (the dispatcher's path, float lists) shares 0.0's executable with -0.0",
        T_EAGER,
    ),
    _toolkit(
        "bridge-cached-view-ignores-dtype",
        "tpu_kernels/runtime/bridge.py",
        "            and self.dtype is t.dtype\n",
        "",
        "a cached view served after t.data = t.data.view(another dtype): the old dtype's values",
        (*T_EAGER, "tests/test_bridge.py"),
    ),
    _toolkit(
        "eager-any-dispatch-state-plain",
        EAGER,
        "        or (_include().raw_repr(), _exclude().raw_repr()) not in _PLAIN_STATES\n",
        "",
        "the shortcut bypasses the dispatcher under any dispatch-key guard, not only inference mode",
        T_EAGER,
    ),
    _toolkit(
        "fake-cache-without-statics",
        FAKE,
        "            key = (_hashable(statics), _spec_key(tensors))\n"
        "            outs = self.cache.get_or_build(key, lambda: self._concrete",
        "            key = (_spec_key(tensors),)\n            outs = self.cache.get_or_build(key, lambda: self._concrete",
        "fake results keyed on the tensors only: k=2 after k=4 gets k=4's shapes",
        T_FAKE,
    ),
    _toolkit(
        "fake-symbolic-plan-without-statics",
        FAKE,
        'key = ("symbolic", _hashable(statics), sizes.key)',
        'key = ("symbolic", sizes.key)',
        "a symbolic-shape plan reused across statics: under dynamic compile k=3 after k=2 gets k=2's shapes",
        T_FAKE,
    ),
    _toolkit(
        "buckets-pad-broadcast-dims",
        BUCKETS,
        "            if s != n or size == n:",
        "            if size == n:",
        "a size-1 (broadcast) dim padded to the bucket: the kernel sees shapes the op promises it never "
        "does (results stay right: the copy broadcasts the row; the work grows)",
        T_BUCKETS,
        BUCKETS_FAST,
    ),
    _toolkit(
        "buckets-gradients-padded-with-the-pad-value",
        BUCKETS,
        "(d, dataclasses.replace(b, pad=0)) for d, b in dims.items()",
        "(d, b) for d, b in dims.items()",
        "incoming gradients padded with the forward's pad value, not 0: padded rows add to a weight's gradient",
        T_BUCKETS,
        BUCKETS_FAST,
    ),
    _toolkit(
        "buckets-tile-of-the-widest-dtype",
        BUCKETS,
        "itemsize = min(itemsize, t.dtype.itemsize)",
        "itemsize = max(itemsize, t.dtype.itemsize)",
        "the sublane tile of the widest padded dtype: bfloat16 decode steps pad to 8 rows, not 16",
        T_BUCKETS,
        BUCKETS_FAST,
    ),
    _toolkit(
        "buckets-power-of-two-off-by-one",
        BUCKETS,
        "1 << (n - 1).bit_length()",
        "1 << n.bit_length()",
        "a length that is a power of two padded to the next one (8 rows to 16)",
        T_BUCKETS,
        BUCKETS_FAST,
    ),
    _toolkit(
        "correctness-infinities-disagree",
        COMPARE,
        "    diff = torch.where(a == e, 0.0, (a - e).abs())",
        "    diff = (a - e).abs()",
        "equal infinities counted as an error (inf - inf is NaN): a right result with -inf entries fails",
        T_CORRECTNESS,
        CORRECTNESS_FAST,
    ),
    _toolkit(
        "correctness-2-norm-over-infinities",
        COMPARE,
        "    scale2 = float(e[finite].norm()) if bool(finite.any()) else 0.0",
        "    scale2 = float(e.norm())",
        "the reference's 2-norm taken with its infinities: every 2-norm error is 0 beside one inf",
        T_CORRECTNESS,
        CORRECTNESS_FAST,
    ),
    _toolkit(
        "compare-finite-where-reference-is-nan",
        COMPARE,
        "    lost = ~g_special & ~torch.isfinite(w)",
        "    lost = torch.zeros_like(g_special)",
        "a finite result where the reference is NaN or inf passes the element-wise rule",
        T_COMPARE,
        "compar or mismatch or assert_close",
    ),
    _toolkit(
        "compare-size-ignored",
        COMPARE,
        "    allowed = atol + rtol * (w.abs() if size is None else size.to(torch.float64))",
        "    allowed = atol + rtol * w.abs()",
        "the sharding simulation's allowance loses the output's own size: right strategies of small values fail",
        T_COMPARE,
        "compar or mismatch or assert_close",
    ),
    _toolkit(
        "correctness-either-norm-passes",
        CORRECTNESS,
        "    passed = errs.norm2 <= allowed and errs.norm_max <= allowed_max",
        "    passed = errs.norm2 <= allowed or errs.norm_max <= allowed_max",
        "a result passes when either norm is within its allowance",
        T_CORRECTNESS,
        CORRECTNESS_FAST,
    ),
    _toolkit(
        "correctness-failing-baseline-as-yardstick",
        CORRECTNESS,
        "        if judge(errs, dt, reduction=reduction, scale=scale).passed:",
        "        if True:",
        "a baseline that fails its own check still widens the others' allowance",
        T_CORRECTNESS,
        CORRECTNESS_FAST,
    ),
    _toolkit(
        "torchtitan-ffn-fuses-biased-projections",
        TITAN,
        "type(w) is Linear and w.bias is None for w",
        "type(w) is Linear for w",
        "w1/w3 with a bias fused into Tokamax's GLU, which has none: the bias is dropped",
        T_TITAN,
        TITAN_FAST,
    ),
    _toolkit(
        "torchtitan-attention-drops-scale",
        TITAN,
        "mask=dense_mask(attention_masks), scale=scale",
        "mask=dense_mask(attention_masks)",
        "flex attention's scale= ignored: the default 1/sqrt(head_dim) instead",
        T_TITAN,
        TITAN_FAST,
    ),
    _toolkit(
        "hf-attention-float-mask-padding-attended",
        HF_ATTENTION,
        "value=torch.finfo(bias.dtype).min",
        "value=0.0",
        "an additive float mask padded with 0: the bucket's padded keys are attended",
        T_HF,
        HF_FAST,
    ),
    _toolkit(
        "hf-attention-ignores-is-causal",
        HF_ATTENTION,
        'causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)',
        'causal = getattr(module, "is_causal", True)',
        "is_causal=False given by the caller ignored for the module's own flag: an encoder call made causal",
        T_HF,
        HF_FAST,
    ),
    # ---- issue 46: the tuner, its tables, the chip names and the VMEM limits ----
    _toolkit(
        "tuner-tie-ceiling-fastest-median",
        SELECT,
        "    ceiling = min(t.p90 for t in timings.values())",
        "    ceiling = min(t.median for t in timings.values())",
        "the tie ceiling is the fastest median: the op leaves its default on noise and calls it decisive",
        T_SELECT,
    ),
    _toolkit(
        "tuner-any-fixed-tunable",
        POINT,
        "keep = [c for c in t.configs if all(c[t.names.index(n)] == v for n, v in fixed.items())]",
        "keep = [c for c in t.configs if any(c[t.names.index(n)] == v for n, v in fixed.items())]",
        "configs with other values of a tunable the call fixes get tuned",
        T_TUNER,
        TUNER_FAST,
    ),
    _toolkit(
        "tuner-own-value-never-measured",
        POINT,
        "    return keep or [t.config_of(fixed)]",
        "    return keep or list(t.configs)",
        "a call fixing a tunable outside the candidates tunes every declared config, never its own value",
        T_TUNER,
        TUNER_FAST,
    ),
    _toolkit(
        "predict-block-copies-off-by-one",
        PREDICT,
        "copies = math.prod(grid[: max(moving) + 1]) if moving else 1",
        "copies = math.prod(grid[: max(moving)]) if moving else 1",
        "an 8192x4096 copy predicted as one block of traffic",
        T_TUNER,
        TUNER_FAST,
    ),
    _toolkit(
        "predict-step-overhead-in-ms",
        PREDICT,
        "STEP_OVERHEAD_S = 0.21e-6",
        "STEP_OVERHEAD_S = 0.21e-3",
        "the per-step overhead in ms, where the docs say us",
        T_TUNER,
        TUNER_FAST,
    ),
    _toolkit(
        "body-when-on-every-step",
        BODY,
        "taken = mask & (np.broadcast_to(np.clip(index, 0, len(branches) - 1), mask.shape) == i)",
        "taken = mask",
        "every branch of a pl.when counted on every grid step: a causal attention's skipped blocks cost flops",
        ("tests/tuning/test_body.py",),
    ),
    _toolkit(
        "predict-no-dispatch-floor",
        PREDICT,
        "    total.seconds = max(DISPATCH_FLOOR_S, total.kernel_s)",
        "    total.seconds = total.kernel_s",
        "candidates below the dispatch floor ranked by differences no call shows, not tied to the default",
        T_TUNER,
        TUNER_FAST,
    ),
    _toolkit(
        "predict-float32-at-bf16-peak",
        PREDICT,
        "        return chip.bf16_flops * FLOAT32_MXU_FRACTION",
        "        return chip.bf16_flops",
        "float32 dots priced at the bf16 peak (six passes priced as one)",
        T_TUNER,
        TUNER_FAST,
    ),
    _toolkit(
        "lookup-oldest-other-version",
        LOOKUP,
        "        return max(same, key=lambda e: version_order(e.toolkit)), ",
        "        return min(same, key=lambda e: version_order(e.toolkit)), ",
        "among entries of other toolkit versions the oldest wins",
        T_LOOKUP,
    ),
    _toolkit(
        "lookup-versions-as-strings",
        LOOKUP,
        "        return max(same, key=lambda e: version_order(e.toolkit)), ",
        "        return max(same, key=lambda e: e.toolkit), ",
        "toolkit versions compared as strings: 0.9.0 is newer than 0.10.0",
        T_LOOKUP,
    ),
    _toolkit(
        "lookup-table-beside-kernel-wins",
        LOOKUP,
        "    for path in reversed(paths):  # the first path wins: read it last",
        "    for path in paths:  # the first path wins: read it last",
        "the table beside the kernel overrides $TPU_KERNELS_TUNING_DIR's",
        T_LOOKUP,
    ),
    _toolkit(
        "lookup-memo-forgets-given-tunables",
        LOOKUP,
        "memo_key = (first.device, _metadata(tensors), given, _OVERLAYS.get()",
        "memo_key = (first.device, _metadata(tensors), _OVERLAYS.get()",
        "the lookup memo forgets which tunables the caller gave: the table overrides an explicit value",
        T_LOOKUP,
    ),
    _toolkit(
        "lookup-predicted-replaces-measured-in-memory",
        LOOKUP,
        'if not (old is not None and old.source != "predicted" and e.source == "predicted"):',
        "if True:",
        "in memory a predicted entry replaces a measured one (the file keeps the measurement)",
        T_LOOKUP,
    ),
    _toolkit(
        "lookup-autotune-skips-nearest",
        LOOKUP,
        'if how not in ("exact", "failed") and os.environ.get(AUTOTUNE_ENV) == "1":',
        'if entry is None and os.environ.get(AUTOTUNE_ENV) == "1":',
        "with TPU_KERNELS_AUTOTUNE=1 an op with a nearest-bucket entry is never tuned for its own bucket",
        T_LOOKUP,
    ),
    _toolkit(
        "lookup-reads-without-candidate-types",
        LOOKUP,
        "            t = tables.read(path, op, _candidates(op))",
        "            t = tables.read(path, op)",
        "an entry's block_rows: 512.0 passes (512.0 == 512) and every call gets a float static",
        T_LOOKUP,
    ),
    _toolkit(
        "table-types-by-isinstance",
        TABLE,
        "        if type(value) not in types:",
        "        if not isinstance(value, tuple(types)):",
        "true accepted for an int tunable (bool is an int subclass): the kernel gets a bool static",
        T_TABLE,
    ),
    _toolkit(
        "table-open-blocks",
        TABLE,
        'fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | ',
        "fd = os.open(p, os.O_RDONLY | ",
        "a FIFO where a table belongs blocks the op's first call until someone writes to it",
        T_TABLE,
    ),
    _toolkit(
        "table-reads-any-file-kind",
        TABLE,
        "        if not stat.S_ISREG(st.st_mode):",
        "        if stat.S_ISDIR(st.st_mode):",
        "a FIFO, socket or device where a table belongs is read as one",
        T_TABLE,
    ),
    _toolkit(
        "table-size-unbounded",
        TABLE,
        "        if max(st.st_size, size) > MAX_TABLE_BYTES:",
        "        if False:",
        "a table above the size limit is cut at the limit and parsed",
        T_TABLE,
    ),
    _toolkit(
        "chip-v5litepod-is-v5p",
        CHIP,
        '"v5litepod": "v5e",',
        '"v5litepod": "v5p",',
        "a v5e Cloud VM (v5litepod-N) reads v5p's entries",
        T_CHIP,
    ),
    _toolkit(
        "vmem-whole-array-double-buffered",
        "tpu_kernels/check/vmem.py",
        "            copies = 1 if one_step or bm.has_trivial_window() else 2",
        "            copies = 1 if one_step else 2",
        "a whole-array block at a constant index counted twice: kernels that fit are refused",
        T_VMEM,
    ),
    # ---- issue #45: the VMEM model calibrated against a v5e ----
    _toolkit(
        "vmem-one-step-double-buffered",
        "tpu_kernels/check/vmem.py",
        "            copies = 1 if one_step or bm.has_trivial_window() else 2",
        "            copies = 1 if bm.has_trivial_window() else 2",
        "a one-step grid's blocks counted twice: a one-step kernel the v5e compiles is refused",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "vmem-body-temporaries-not-counted",
        "tpu_kernels/check/temporaries.py",
        "    return held(body) + spill(body)",
        "    return 0",
        "the body's float32 values are left out: rmsnorm_backward at 256 rows passes, and the v5e refuses it",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "vmem-exactly-the-limit-refused",
        "tpu_kernels/check/vmem.py",
        "    return Verdict(k.estimate <= limit, k.estimate, limit, name)",
        "    return Verdict(k.estimate < limit, k.estimate, limit, name)",
        "buffers of exactly 16.0 MiB fail the check; the v5e compiles them",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "vmem-every-upcast-held-whole",
        "tpu_kernels/check/temporaries.py",
        "            total += upcasts[0].bytes + sum(v.upcast_of for v in upcasts[1:])",
        "            total += sum(v.bytes for v in upcasts)",
        "softmax_backward's two bf16 upcasts counted whole: blocks the v5e compiles fail the check",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "vmem-block-reads-held",
        "tpu_kernels/check/temporaries.py",
        '        across = [v for v in body.values if v.start < pos < v.end and v.primitive != "get"]',
        "        across = [v for v in body.values if v.start < pos < v.end]",
        "block reads that outlive a reduction counted: float32 kernels the v5e compiles fail the check",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "vmem-matmul-result-not-held",
        "tpu_kernels/check/temporaries.py",
        "            total += min(sum(v.bytes for v in body.values if v.start == pos), MATMUL_RESULT_HELD_MAX)",
        "            total += 0",
        "a matmul's float32 result left out: 16.0 MiB of matmul buffers pass, and the v5e refuses them",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "vmem-matmul-result-held-whole",
        "tpu_kernels/check/temporaries.py",
        "            total += min(sum(v.bytes for v in body.values if v.start == pos), MATMUL_RESULT_HELD_MAX)",
        "            total += sum(v.bytes for v in body.values if v.start == pos)",
        "a matmul's float32 result counted whole: 2048x2048x512 template calls the v5e compiles fail the check",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "vmem-forwarded-scratch-held",
        "tpu_kernels/check/vmem.py",
        "        if j in not_held:  # written before it is read at every step: stores forwarded to loads",
        "        if False:",
        "scratch written before it is read at every step counted: 24-96 MiB of it the v5e compiles fail",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "vmem-no-register-spill",
        "tpu_kernels/check/temporaries.py",
        "    return SPILL_BYTES if most_live(body) > SPILL_AFTER_VALUES else 0",
        "    return 0",
        "no register spill for 9 values live at once: 16.0 MiB of buffers pass, and the v5e refuses them",
        T_VMEM_MODEL,
    ),
    _toolkit(
        "chips-v5p-scoped-32-mib",
        "tpu_kernels/lowering/chips.py",
        '    "v5p": 16 * _MIB,',
        '    "v5p": 32 * _MIB,',
        "v5p's default scoped VMEM limit taken as 32 MiB: kernels that fail to compile there pass the check",
        T_VMEM,
    ),
    # ---- issue 45: the per-key build lock and the tuner's parallel build ----
    _toolkit(
        "cache-build-lock-removed",
        MEMORY,
        "            pending = self._building.get(key)\n            if pending is None:",
        "            pending = None\n            if pending is None:",
        "no per-key build lock: threads asking for one key at once each build it",
        T_LOCK,
    ),
    _toolkit(
        "cache-failed-build-kept",
        MEMORY,
        "            with self._lock:\n                del self._building[key]\n            pending.error = e",
        "            pending.error = e",
        "a failed build stays pending: every later call for the key raises its old error, never retries",
        T_LOCK,
    ),
    # ---- issue 47: float32 "high" as three bf16 passes in a kernel body ----
    _toolkit(
        "three-pass-dot-drops-a-cross-term",
        "tpu_kernels/runtime/mosaic_precision.py",
        "return (f(xl, yh) + f(xh, yl) + f(xh, yh)).astype(out)",
        "return (f(xh, yl) + f(xh, yh)).astype(out)",
        "x_lo y_hi dropped: \"high\" is then about one pass's error (2^-9), not bf16_3x's",
        ("tests/test_mosaic_precision.py",),
    ),
    _toolkit(
        "three-pass-dot-asked-name-not-kept",
        "tpu_kernels/runtime/mosaic_precision.py",
        "    with _REQUESTED(asked):\n        if wanted == asked:",
        "    with contextlib.nullcontext():\n        if wanted == asked:",
        "the asked name not kept while the body traces: it reads the 'highest' it was raised to, and 'high' costs six passes, not three",
        ("tests/test_mosaic_precision.py",),
    ),
    _toolkit(
        "predict-dot-precision-dropped",
        "tpu_kernels/tuner/body.py",
        'return Dot(m, n, k, batch, lhs.dtype, steps, _precision(eqn.params.get("precision")))',
        "return Dot(m, n, k, batch, lhs.dtype, steps)",
        "every float32 dot priced at one bf16 pass, whatever precision it was traced at",
        ("tests/tuning/test_predict.py",),
    ),
    _toolkit(
        "lookup-memo-without-precision",
        LOOKUP,
        "self._autocast_state(first.device),\n                    precision.current())",
        "self._autocast_state(first.device))",
        "a tuned config validated at one float32 matmul precision served at another, where the kernel refuses it",
        ("tests/tuning/test_lookup.py",),
    ),
    _toolkit(
        "tuner-prebuild-runs-the-kernel",
        "tpu_kernels/runtime/devices/jax_exec.py",
        "        if prebuild.ACTIVE and prebuild.active():",
        "        if False:",
        "the tuner's build ahead runs each candidate too, in the pool, concurrently with the others",
        T_PARALLEL,
    ),
    # ---- issue 59: the chip runner's figures (bench/reports/chip_v5e.json, README, performance.md) ----
    _toolkit(
        "chip-normwise-over-output-norm",
        CHIP_MEASURE,
        "    den = float(np.linalg.norm(ref))",
        "    den = float(np.linalg.norm(y))",
        "the error divided by the output's norm, not the float64 reference's: a half-scale output "
        "reads 1.0 instead of 0.5, an all-zero one the reference's norm instead of 1.0",
        T_CHIP_FIGURES,
    ),
    _toolkit(
        "chip-speed-inverted",
        CHIP_RUN,
        'row[f"speed_vs_{name}"] = tb / t',
        'row[f"speed_vs_{name}"] = t / tb',
        "speed_vs_* as kernel time over baseline time: a kernel twice as fast is recorded at 0.5x",
        T_CHIP_FIGURES,
    ),
    _toolkit(
        "chip-speed-in-program-inverted",
        CHIP_RUN,
        'row[f"speed_in_program_vs_{name}"] = tbi / ti',
        'row[f"speed_in_program_vs_{name}"] = ti / tbi',
        "a dispatch-bound point's in-program speed inverted: twice as fast reads 0.5x",
        T_CHIP_FIGURES,
    ),
    _toolkit(
        "chip-layer-speed-inverted",
        CHIP_LAYER,
        'row["speed_vs_xla"] = round(row["xla_ms"] / row["ours_ms"], 3)',
        'row["speed_vs_xla"] = round(row["ours_ms"] / row["xla_ms"], 3)',
        "the decoder layer's speed as our time over XLA's: a layer twice as fast is recorded at 0.5x",
        T_CHIP_FIGURES,
    ),
    _toolkit(
        "chip-report-speed-up-inverted",
        CHIP_REPORT,
        "_x(tb / ta) if tb and ta",
        "_x(ta / tb) if tb and ta",
        "performance.md's before-and-after speed-up as new time over old: defaults twice as fast read 0.50x",
        T_CHIP_FIGURES,
    ),
    _toolkit(
        "chip-in-program-time-not-per-call",
        CHIP_RUN,
        "measure.timed(compiled, args, rounds=rounds, round_s=0.05) / n",
        "measure.timed(compiled, args, rounds=rounds, round_s=0.05)",
        "time_in_program_s is the time of all 32 calls in the program, not of one (speeds unchanged)",
        T_CHIP_FIGURES,
    ),
    # ---- issue 59's fresh edits: the corpus, its fit, the three-pass dot's hook, the layer's gradients ----
    _toolkit(
        "corpus-row-block-single-buffered",
        CORPUS,
        "rows = int(target_mib * _MIB) // (2 * arrays * width * itemsize)",
        "rows = int(target_mib * _MIB) // (arrays * width * itemsize)",
        "row blocks sized single-buffered: every block twice the MiB its note says, and the ids the "
        "chip's record measured are no longer the corpus's",
        T_CORPUS,
    ),
    _toolkit(
        "corpus-keeps-calls-the-wrapper-refuses",
        CORPUS,
        "        if c.traces and not _traces(c):",
        "        if False:",
        "calls whose wrapper refuses the block (its own VMEM cap) kept: the chip is asked to compile "
        "calls that raise in Python",
        T_CORPUS,
    ),
    _toolkit(
        "corpus-verdict-without-compiling",
        CORPUS,
        "        jax.jit(call.fn).lower(*call.args).compile()",
        "        jax.jit(call.fn).lower(*call.args)",
        "a call's verdict taken at lowering: Mosaic's VMEM out-of-memory comes at compile, so every call 'compiles'",
        T_CORPUS,
    ),
    _toolkit(
        "corpus-attention-never-causal",
        CORPUS,
        "causal=shape[2] == 4096",
        "causal=False",
        "the causal attention calls of the corpus made non-causal: the record's causal ids are no longer measured",
        T_CORPUS,
    ),
    _toolkit(
        "fit-error-linear-not-log",
        CHIP_TUNING,
        "math.log(seconds(p, k) / m) ** 2",
        "(seconds(p, k) - m) ** 2",
        "the fit's least squares in seconds, not log seconds: the long calls decide every constant",
        T_CHIP_FIT,
    ),
    _toolkit(
        "fit-float32-fraction-inverted",
        CHIP_TUNING,
        'ratio = a["pallas"]["time_s"] / b["pallas"]["time_s"]',
        'ratio = b["pallas"]["time_s"] / a["pallas"]["time_s"]',
        "float32's share of the bf16 MXU rate as f32 time over bf16 time: 5.7, not 0.174",
        T_CHIP_FIT,
    ),
    _toolkit(
        "fit-choice-over-best-inverted",
        CHIP_TUNING,
        'chosen["measured_s"] / best if',
        'best / chosen["measured_s"] if',
        "the predicted choice's time as best over choice: every choice is within 1.05x of the best",
        T_CHIP_FIT,
    ),
    _toolkit(
        "fit-ties-to-the-default-last",
        CHIP_TUNING,
        'return (not c["default"], ',
        'return (c["default"], ',
        "predicted ties broken with the default last, not first, unlike the tuner",
        T_CHIP_FIT,
    ),
    _toolkit(
        "fit-seconds-without-dispatch-floor",
        CHIP_TUNING,
        '    return max(k["DISPATCH_FLOOR_S"], kernel + parts["prologue_s"] * hbm)',
        '    return kernel + parts["prologue_s"] * hbm',
        "the fit's predicted time without the dispatch floor its constants were given",
        T_CHIP_FIT,
    ),
    _toolkit(
        "three-pass-dot-splits-bf16",
        MOSAIC,
        "if not (x.dtype == y.dtype == jnp.float32 and _is_high(requested())):",
        "if not _is_high(requested()):",
        "a bf16 product under 'high' split into three passes (two of them of zero halves): three times the MXU work",
        T_MOSAIC,
    ),
    _toolkit(
        "three-pass-dot-for-highest",
        MOSAIC,
        "        return jax.lax.Precision(name) == jax.lax.Precision.HIGH",
        "        return jax.lax.Precision(name) != jax.lax.Precision.DEFAULT",
        "'highest' computed as three bf16 passes: less accurate than asked",
        T_MOSAIC,
    ),
    _toolkit(
        "mosaic-dot-precision-needs-both-float32",
        MOSAIC,
        'any(getattr(a, "dtype", None) == jnp.float32 for a in avals_in)',
        'all(getattr(a, "dtype", None) == jnp.float32 for a in avals_in)',
        "a float32 x bf16 kernel dot lowered at one pass under 'highest': its float32 operand rounded to bf16",
        T_MOSAIC,
    ),
    _toolkit(
        "kernel-hook-fallback-keeps-high",
        MOSAIC,
        "        with jax.default_matmul_precision(kernel_precision(name)), _ACTIVE(True):",
        "        with jax.default_matmul_precision(name), _ACTIVE(True):",
        "without Pallas's tracing hooks, 'high' traced as is: every float32 kernel dot is HIGH, which Mosaic refuses",
        T_MOSAIC,
    ),
    _toolkit(
        "kernel-hook-skips-mesh-kernels",
        "tpu_kernels/_compat.py",
        '_PALLAS_KERNEL_TRACING = ("pallas_tracing_grid_env", "pallas_mpmd_tracing_context")',
        '_PALLAS_KERNEL_TRACING = ("pallas_tracing_grid_env",)',
        "pl.kernel bodies (a core mesh, traced through mpmd_map) never hooked: their 'high' dots stay HIGH",
        T_MOSAIC,
    ),
    _toolkit(
        "layer-grads-best-leaf",
        CHIP_LAYER,
        '        row["error_grads_ours_vs_xla"] = max(',
        '        row["error_grads_ours_vs_xla"] = min(',
        "the layer's gradient error is its best leaf's, not its worst: a wrong weight gradient reads 0",
        T_CHIP_FIGURES,
    ),
    _toolkit(
        "layer-grads-against-ours",
        CHIP_LAYER,
        "measure.normwise(a, b) for a, b in zip",
        "measure.normwise(b, a) for a, b in zip",
        "the gradients' error relative to our layer's, not the XLA layer's: half-size gradients read 1.0, not 0.5",
        T_CHIP_FIGURES,
    ),
    _toolkit(
        "layer-grads-of-x-only",
        CHIP_LAYER,
        "                return vjp(cot)",
        "                return vjp(cot)[:1]",
        "only the input's gradient computed and compared: every weight gradient goes unchecked",
        T_CHIP_FIGURES,
    ),
    _toolkit(
        "layer-grads-ours-against-ours",
        CHIP_LAYER,
        "        ours, theirs = grads(ours), grads(theirs)",
        "        ours, theirs = grads(ours), grads(ours)",
        "our layer's gradients compared with themselves (and timed against themselves)",
        T_CHIP_FIGURES,
    ),
)
