"""`tpu-kernels check` says on each op's line what failed: a FAILED line that read
"1 of 1 calls lowered" for a dtype or VMEM problem looked like a contradiction (issue 15)."""

from __future__ import annotations

import re

import jax
import torch
from jax.experimental import pallas as pl

from tpu_kernels import tpu_kernel
from tpu_kernels.cli import main
from tpu_kernels.commands.check import _summary
from tpu_kernels.lowering_check.explain import Explanation
from tpu_kernels.lowering_check.lowering import ExampleResult, OpReport

DEMO = "tests.lowering_check.demo_kernels"


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


@tpu_kernel(
    "docs_check_wording::doubled64",
    examples=lambda: [((jax.ShapeDtypeStruct((8, 128), "float64"),), {})],
)
def doubled64(x: torch.Tensor) -> torch.Tensor:
    return pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def _line(out: str, op: str) -> str:
    [line] = [ln for ln in out.splitlines() if re.match(rf"\S+ +{re.escape(op)} ", ln)]
    return line


def test_a_vmem_failure_after_lowering_is_named_on_the_line(capsys):
    assert main(["check", DEMO, "--chip", "v5p", "--filter", "huge_blocks"]) == 1
    line = _line(capsys.readouterr().out, "check_demo::huge_blocks")
    assert line.startswith("FAILED   check_demo::huge_blocks  1 of 1 calls lowered, 1 of them failed ")
    assert "after lowering (vmem), VMEM per grid step up to 512.0 MiB" in line


def test_a_dtype_failure_after_lowering_is_named_on_the_line(capsys):
    assert main(["check", __name__, "--filter", "doubled64"]) == 1
    line = _line(capsys.readouterr().out, "docs_check_wording::doubled64")
    assert "1 of 1 calls lowered, 1 of them failed after lowering (dtype)" in line, line


def test_a_call_that_did_not_lower_names_why(capsys):
    assert main(["check", DEMO, "--filter", "misaligned"]) == 1
    line = _line(capsys.readouterr().out, "check_demo::misaligned")
    assert line.rstrip().endswith("0 of 1 calls lowered (block-shape)")


def _example(lowered: bool, *kinds: str) -> ExampleResult:
    problems = [Explanation(k, "...", "") for k in kinds]
    return ExampleResult("f32[8,128]", lowered=lowered, mosaic=lowered, problems=problems)


def test_mixed_results_and_a_clean_op():
    report = OpReport(
        "ns::op",
        "failed",
        examples=[_example(True), _example(False, "dtype"), _example(True, "vmem", "coverage", "vmem")],
    )
    assert (
        _summary(report)
        == "2 of 3 calls lowered (1 not: dtype), 1 of them failed after lowering (vmem, coverage)"
    )
    clean = OpReport("ns::op", "ok", examples=[_example(True), _example(True)])
    assert _summary(clean) == "2 of 2 calls lowered"
