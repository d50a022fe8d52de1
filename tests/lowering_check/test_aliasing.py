"""`tpu-kernels check` and mutated arguments: a pallas_call must alias the argument it updates
(`input_output_aliases`), and the aliased pattern the docs show is right on the CPU and lowers
for the TPU."""

from __future__ import annotations

import pytest
import torch

from tests.lowering_check import kv_append_kernels as kv
from tpu_kernels import CheckFailure, checked, interpret_mode
from tpu_kernels.cli import main
from tpu_kernels.lowering_check import check_op

MODULE = "tests.lowering_check.kv_append_kernels"


def _cache(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(32, 128, generator=g), torch.randn(kv.ROWS, 128, generator=g), torch.tensor([8])


def test_an_unaliased_mutated_argument_fails_the_check_and_names_the_fix(capsys):
    assert main(["check", MODULE, "--filter", "append_unaliased_|append_$"]) == 1
    out = capsys.readouterr().out
    assert "ok       check_alias::append_ " in out, out
    assert (
        "FAILED   check_alias::append_unaliased_  1 of 1 calls lowered, 1 of them failed after lowering (aliasing)"
        in out
    )
    assert (
        "error (aliasing): kernel _append returns the new value of the mutated argument 'cache' as output 0, "
        "which input_output_aliases does not tie to 'cache' (input 2): the elements no grid step writes are "
        "undefined" in out
    ), out
    assert "pass input_output_aliases={2: 0} to its pallas_call" in out, out


@pytest.mark.parametrize(
    ("op", "found"),
    [
        (kv.append_jitted_unaliased_, "which input_output_aliases does not tie to 'cache' (input 2)"),
        (
            kv.overwrite_aliased_to_src_,
            "which input_output_aliases ties to input 3, not to 'cache' (input 2)",
        ),
    ],
)
def test_the_check_follows_the_value_and_the_alias_to_the_argument(op, found):
    report = check_op(op)
    [example] = report.examples
    assert report.status == "failed" and [p.kind for p in example.problems] == ["aliasing"], report
    assert found in example.problems[0].message, example.problems[0].message


def test_an_unaliased_output_that_the_grid_writes_whole_is_only_a_warning():
    report = check_op(kv.add_unaliased_)
    [example] = report.examples
    assert report.status == "ok" and not example.problems, report
    assert any(
        "costs a second buffer and a copy; pass input_output_aliases={1: 0}" in w for w in example.warnings
    )


def test_the_aliased_append_lowers_for_the_tpu_and_is_right_on_the_cpu():
    report = check_op(kv.append_)
    [example] = report.examples
    assert report.status == "ok" and example.lowered and example.mosaic, report
    assert not any("alias" in w for w in example.warnings), example.warnings
    for mode in ("fast", "tpu"):
        cache, new, pos = _cache(0)
        want = cache.clone()
        want[8:16] = new
        with interpret_mode(mode), checked(strict=True):  # checked mode compares the cache too
            kv.append_(cache, new, pos.to(torch.int32))
        assert torch.equal(cache, want), mode


def test_the_unaliased_append_loses_the_rows_it_does_not_write():
    # what the check guards against: in the TPU interpreter the 24 rows the kernel does not
    # write come back NaN; checked mode fails the call
    cache, new, pos = _cache(1)
    with interpret_mode("tpu"):
        kv.append_unaliased_(cache, new, pos.to(torch.int32))
    assert int(cache.isnan().any(-1).sum()) == 24 and torch.equal(cache[8:16], new)
    cache, new, pos = _cache(2)
    with checked(), pytest.raises(CheckFailure, match=r"append_unaliased_ mutated argument 'cache'"):
        kv.append_unaliased_(cache, new, pos.to(torch.int32))
