"""Toolkit mutants of the verdicts (tpu_kernels/bench, tpu_kernels/verification, bench/): the
benchmark's correctness column and the distances it reads."""

from __future__ import annotations

from tpu_kernels.mutate.catalogue.base import (
    COMPARE,
    CORRECTNESS,
    CORRECTNESS_FAST,
    T_COMPARE,
    T_CORRECTNESS,
    Mutation,
    _toolkit,
)

MUTANTS: tuple[Mutation, ...] = (
    # ---- issue #39's ten survivors ----
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
    # ---- issue 46's faults, each fixed ----
    _toolkit(
        "compare-inconclusive-called-ok",
        "tpu_kernels/bench/compare.py",
        "    if relative * (1 + threshold) < 1:",
        "    if False:",
        "a 5.4x slower op is ok beside a baseline that slowed 344x on a busy machine",
        ("tests/bench/test_compare.py",),
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
)
