"""`tpu-kernels check`: TPU lowering, plain-words errors, VMEM estimates, races."""

from __future__ import annotations

import json
import re

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tests.lowering_check import demo_kernels as demo
from tests.registries import kernel_families
from tpu_kernels.cli import main
from tpu_kernels.lowering_check import check_op, explain, kernel_footprints
from tpu_kernels.lowering_check.examples import example_calls, scale_down
from tpu_kernels.lowering_check.races import explain_race

DEMO = "tests.lowering_check.demo_kernels"


def test_shipped_kernels_all_lower_for_tpu(capsys):
    """A kernel that cannot lower for the TPU does not ship."""
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    for op in (family.op for family in kernel_families()):
        assert f"ok       {op.name} " in out
        assert f"ok       {op.backward_op.name} " in out
    assert "0 failed, 0 skipped" in out


def test_misaligned_blocks_fail_with_a_readable_message(capsys):
    assert main(["check", DEMO, "--filter", "misaligned"]) == 1
    out = capsys.readouterr().out
    assert "FAILED   check_demo::misaligned" in out
    assert (
        "error (block-shape): block shape (3, 5) of input 0 (array shape (63, 125)) in kernel _double" in out
    )
    assert "3 is neither a multiple of 8 nor the array's 63, and 5 is neither a multiple of 128" in out
    assert "raw: ValueError: The Pallas TPU lowering currently requires" in out  # the original, clipped
    assert "1 ops: 0 ok, 1 failed, 0 skipped" in out


def test_unsupported_operation_is_named():
    report = check_op(demo.sorts)
    [result] = report.examples
    assert report.status == "failed" and not result.lowered
    [problem] = result.problems
    assert problem.kind == "unsupported-op"
    assert problem.message.startswith("the kernel uses `sort`, which Pallas cannot lower for the TPU")


def test_vmem_overflow_fails_and_names_the_chip():
    report = check_op(demo.huge_blocks, chip_name="v5p")
    [result] = report.examples
    assert result.lowered and report.status == "failed"  # export cannot see it; the estimate does
    [problem] = result.problems
    assert problem.kind == "vmem"
    assert problem.message == (
        "kernel _double needs about 512.0 MiB of VMEM per grid step (512.0 MiB of buffers), which misses "
        "the 64.0 MiB of VMEM a TPU v5p core has by 448.0 MiB; use smaller blocks."
    )


def test_ops_without_examples_are_skipped_not_failed(capsys):
    assert main(["check", DEMO, "--filter", "no_examples"]) == 0
    assert "skipped  check_demo::no_examples  no examples" in capsys.readouterr().out


def test_backward_examples_are_derived_from_the_forward():
    # explicit backward: parameters bound by name to inputs, outputs and grad_<output>
    [(args, kwargs)] = example_calls(demo.scaled.backward_op)
    assert [a.shape for a in args] == [(16, 256), (16, 256)] and kwargs == {"scale": 3.0}
    # derived (jax.vjp) backward: (grad_out, *forward args), bound the same way
    [(args, kwargs)] = example_calls(demo.sound_matmul.backward_op)
    grad_out, a, b = args
    assert (grad_out.shape, a.shape, b.shape) == ((128, 128), (128, 512), (512, 128))
    assert check_op(demo.scaled.backward_op).status == "ok"
    assert check_op(demo.sound_matmul.backward_op).status == "ok"


def test_json_report(tmp_path, capsys):
    path = tmp_path / "check.json"
    assert main(["check", DEMO, "--filter", "scaled|misaligned", "--json", str(path)]) == 1
    report = json.loads(path.read_text())
    assert report["schema"] == "tpu_kernels.check/1" and report["chip"]["name"] == "v6e"
    by_name = {op["op"]: op for op in report["ops"]}
    assert by_name["check_demo::misaligned"]["status"] == "failed"
    [example] = by_name["check_demo::scaled"]["examples"]
    assert example["lowered"] and example["mosaic"] and example["kernels"][0]["kernel"] == "_double"


def test_verbose_lists_every_vmem_buffer(capsys):
    assert main(["check", "-v", "--filter", "tpu_kernels::matmul$"]) == 0
    out = capsys.readouterr().out
    # the 2048^3 example at its default (512, 512, 2048) blocks, one K step (kernels/matmul/blocks.py):
    # double-buffered inputs and output, the dot's 1 MiB float32 product as the body's, and no
    # scratch (a one-step product is written at once: pallas._one_step)
    section = out[out.index("bf16[2048,2048], bf16[2048,2048]"):]
    assert "kernel _kernel, grid 4x4x1: 10.0 MiB of VMEM per step (9.0 MiB buffers + 1.0 MiB body" in section
    assert "input 0    bfloat16[512, 2048] x2: 4.0 MiB" in section
    assert "input 1    bfloat16[2048, 512] x2: 4.0 MiB" in section
    assert "output 0   bfloat16[512, 512] x2: 1.0 MiB" in section
    assert "scratch" not in section


def test_vmem_estimate_counts_buffers_copies_and_tile_padding():
    def body(x_ref, y_ref, o_ref, acc_ref, sem):
        o_ref[...] = x_ref[...]

    def kernel(x, y):
        return pl.pallas_call(
            body,
            out_shape=jax.ShapeDtypeStruct((4, 64, 256), jnp.bfloat16),
            grid=(4,),
            in_specs=[
                pl.BlockSpec((None, 64, 256), lambda i: (i, 0, 0), pipeline_mode=pl.Buffered(1)),
                pl.BlockSpec(memory_space=pl.ANY),  # stays in HBM: not counted
            ],
            out_specs=pl.BlockSpec((None, 64, 256), lambda i: (i, 0, 0)),
            scratch_shapes=[pltpu.VMEM((10, 1), jnp.float32), pltpu.SemaphoreType.DMA(())],
        )(x, y)

    spec = jax.ShapeDtypeStruct((4, 64, 256), jnp.bfloat16)
    [k] = kernel_footprints(kernel, spec, spec)
    assert k.kernel == "body" and k.grid == (4,)
    sizes = {b.what: (b.shape, b.copies, b.bytes) for b in k.buffers}
    assert sizes == {
        "input 0": ((64, 256), 1, 64 * 256 * 2),  # Buffered(1)
        "output 0": ((64, 256), 2, 2 * 64 * 256 * 2),  # double-buffered
        "scratch 0": ((10, 1), 1, 16 * 128 * 4),  # one (8, 128) f32 tile would not hold 10 rows
    }


def test_explain_falls_back_to_the_first_line():
    e = explain(RuntimeError("something new\nwith details"))
    assert (e.kind, e.message) == ("other", "RuntimeError: something new")


def test_scale_down_keeps_equal_sizes_equal():
    calls = [((jax.ShapeDtypeStruct((8, 16, 2048, 128), "bfloat16"),), {"causal": True})]
    [((spec,), kwargs)] = scale_down(calls)
    assert spec.shape == (2, 2, 512, 128) and kwargs == {"causal": True}


def test_race_report_in_plain_words():
    raw = (
        "RACE DETECTED\n  write of ('hbm', 102, 0, 0)[(slice(0, 128, 1), slice(0, 128, 1))] from (0, 1), "
        "pallas_call\n  clock: x\n  write of ('hbm', 102, 0, 0)[(slice(0, 128, 1), slice(0, 128, 1))] from "
        "(0, 0), pallas_call\n"
    )
    assert explain_race(raw).startswith(
        "data race: a write on core 1 and a write on core 0 of hbm buffer 102 [0:128, 0:128]"
    )


@pytest.mark.slow
def test_races_are_found_in_the_tpu_interpreter(capsys):
    assert main(["check", DEMO, "--races", "--filter", "_matmul$"]) == 1
    out = capsys.readouterr().out
    assert "FAILED   check_demo::racy_matmul" in out
    assert "error (race): in the TPU interpreter at f32[128,512], f32[512,128]: data race:" in out
    assert "mark it 'arbitrary'" in out
    assert re.search(
        r"ok +check_demo::sound_matmul +1 of 1 calls lowered, VMEM per grid step up to .*, no races", out
    )


@pytest.mark.slow
def test_shipped_kernels_have_no_races(capsys):
    assert main(["check", "--races"]) == 0
    assert "0 failed" in capsys.readouterr().out


def test_block_shape_errors_are_parsed_when_the_source_path_has_spaces():
    raw = ValueError(
        "The Pallas TPU lowering currently requires that the last two dimensions of your block shape are "
        "divisible by 8 and 128 respectively, or be equal to the respective dimensions of the overall array. "
        "Block spec for outputs[0] in pallas_call _k at my notebook.py[cell 3]:9 has block shape "
        "(Squeezed(), Blocked(block_size=16), Blocked(block_size=64)), array shape (4, 64, 256), and ..."
    )
    e = explain(raw)
    assert e.kind == "block-shape"
    assert e.message.startswith(
        "block shape (None, 16, 64) of output 0 (array shape (4, 64, 256)) in kernel _k at my notebook.py[cell 3]:9 "
        "is not TPU-aligned: 64 is neither a multiple of 128 nor the array's 256;"
    )


def test_a_module_that_cannot_be_imported_is_named(capsys):
    assert main(["check", "no_such_module_for_check"]) == 2
    err = capsys.readouterr().err
    assert "could not import no_such_module_for_check" in err
    assert "no module, .py file or package folder named 'no_such_module_for_check'" in err
