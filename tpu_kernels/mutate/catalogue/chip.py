"""Toolkit mutants of the chip runner (tpu_kernels/chip): its error and speed figures, its corpus,
the layer's gradients."""

from __future__ import annotations

from tpu_kernels.mutate.catalogue.base import (
    CHIP_LAYER,
    CHIP_MEASURE,
    CHIP_REPORT,
    CHIP_RUN,
    CORPUS,
    T_CHIP_FIGURES,
    T_CORPUS,
    Mutation,
    _toolkit,
)

MUTANTS: tuple[Mutation, ...] = (
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
        "chip-sides-timed-one-after-another",
        CHIP_MEASURE,
        "    for _ in range(rounds):\n        for name, (cycle, n) in ready.items():",
        "    for name, (cycle, n) in ready.items():\n        for _ in range(rounds):",
        "time_interleaved runs every round of one side before the next side's: a slow spell of the "
        "host lands on whichever side it covers, as before 3d9b64a",
        T_CHIP_FIGURES,
    ),
    _toolkit(
        "chip-sweep-inputs-per-candidate",
        CHIP_RUN,
        "            if not shared:\n                return pool.submit(prepare, points[i], seeds[i])",
        "            if True:\n                return pool.submit(prepare, points[i], seeds[i])",
        "a tuning sweep makes, puts and checks fresh inputs for every candidate: on the chip the "
        "drawn sample's host work (a float64 reference per softmax candidate) outgrew its timing",
        ("tests/test_chip.py",),
        "share_one_preparation",
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
        'row[name]["time_in_program_s"] = t / n',
        'row[name]["time_in_program_s"] = t',
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
