"""User errors are messages: one line naming the file or argument and the fix, exit status 2
for the CLI; a clear exception from the Python API. docs/troubleshooting.md lists each."""

from __future__ import annotations

import json
import re

import pytest
import torch

from tests.helpers import needs_tokamax, uname
from tpu_kernels import tpu_kernel
from tpu_kernels.bench.results import SCHEMA
from tpu_kernels.cli import main
from tpu_kernels.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    KernelError,
    OpDefinitionError,
    TpuKernelsError,
    UnsupportedError,
    wrapping,
)


def _one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def _report(**result) -> dict:
    return {
        "schema": SCHEMA,
        "environment": {},
        "device": {},
        "settings": {},
        "timer": "",
        "results": [{"benchmark": "b", "point": {}, "point_id": "p", **result}],
    }


@pytest.fixture
def reports(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_report(candidates=[])))
    text = json.dumps(_report(candidates=[]))
    (tmp_path / "truncated.json").write_text(text[: len(text) // 2])
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "nocand.json").write_text(json.dumps(_report()))
    return tmp_path


@pytest.mark.parametrize(
    "name, message",
    [
        ("truncated.json", "truncated.json: not valid JSON (Unterminated string"),
        ("list.json", "list.json: holds a JSON list, not a tpu_kernels benchmark report"),
        ("missing.json", "missing.json: no such file; give the report.json a `tpu-kernels bench` run wrote"),
        ("nocand.json", "nocand.json: result 0 has no 'candidates'"),
    ],
)
def test_compare_names_the_bad_report(reports, capsys, name, message):
    for argv in (
        ["compare", str(reports / name), str(reports / "good.json")],
        ["compare", str(reports / "good.json"), str(reports / name)],
    ):
        err = _one_line_error(capsys, argv)
        assert err.startswith("tpu-kernels compare: ") and message in err, err
    assert main(["compare", str(reports / "good.json"), str(reports / "good.json")]) == 0


def test_bench_names_the_bad_baseline_before_running(reports, capsys, monkeypatch):
    monkeypatch.chdir(reports)  # no bench/ here: the baseline is read first all the same
    err = _one_line_error(capsys, ["bench", "--compare", str(reports / "list.json")])
    assert err.startswith("tpu-kernels bench: --compare ") and "holds a JSON list" in err


def test_bench_without_a_suite(tmp_path, capsys, monkeypatch):
    # (with no target, an empty directory runs the shipped suites: tests/bench/test_suites.py)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    err = _one_line_error(capsys, ["bench", "--suites", "empty"])
    assert (
        err
        == "tpu-kernels bench: no suites in empty (a suite is a .py file defining benchmarks(quick, device_type)); pass a suite file or directory, or --suites DIR."
    )
    err = _one_line_error(capsys, ["bench", "nosuch"])
    assert "no suite 'nosuch' (known suites: " in err and "kernels" in err
    err = _one_line_error(capsys, ["bench", "empty"])
    assert err == "tpu-kernels bench: no suites in directory empty."
    err = _one_line_error(capsys, ["bench", "gone.py"])
    assert err == "tpu-kernels bench: no suite file gone.py."


def test_new_with_dir_pointing_at_a_file(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    err = _one_line_error(capsys, ["new", "my_k", "-t", "elementwise", "--dir", str(afile)])
    assert (
        err
        == f"tpu-kernels new: --dir {afile}: is a file, not a folder; give a folder (it is created if missing)"
    )
    err = _one_line_error(capsys, ["new", "my_k", "-t", "elementwise", "--dir", str(afile / "sub")])
    assert f"is inside {afile}, which is a file" in err
    assert afile.read_text() == "" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize("code, shown", [("3", "3"), ("'bye'", "'bye'")])
def test_check_of_a_module_that_exits(tmp_path, capsys, code, shown):
    module = tmp_path / f"exits_{len(code)}.py"
    module.write_text(f"import sys\nsys.exit({code})\n")
    err = _one_line_error(capsys, ["check", str(module)])
    assert err == (
        f"tpu-kernels check: importing {module} called sys.exit({shown}); the check imports each module, "
        'so keep script code under `if __name__ == "__main__":`'
    )


@tpu_kernel("user_errors::double")
def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_cache_info_names_the_device_types():
    double(torch.ones(2))
    assert double.cache_info("cpu").misses >= 1
    assert double.cache_info(torch.device("cpu")) == double.cache_info()
    with pytest.raises(
        ValueError,
        match=r"user_errors::double: cache_info\(device='gpu'\): .*'cpu' or 'cuda' \(GPUs are 'cuda'\)",
    ):
        double.cache_info("gpu")
    with pytest.raises(ValueError, match="TPU calls are cached by torch_tpu"):
        double.cache_info("tpu")


HELION_KERNEL = """
import helion
import helion.language as hl
import torch

from tpu_kernels import tpu_kernel


@tpu_kernel("user_errors::no_source")
@helion.kernel(backend="pallas", config=helion.Config(block_sizes=[8]))
def no_source(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :] * 2
    return out
"""


def test_a_helion_kernel_without_source_is_refused_at_definition():
    pytest.importorskip("helion")
    with pytest.raises(OpDefinitionError) as info:
        exec(compile(HELION_KERNEL, "<string>", "exec"), {"__name__": "no_source_module"})
    assert str(info.value) == (
        "user_errors::no_source: Helion reads the kernel's Python source to compile it, and no_source "
        "(defined in <string>) has none: it was defined by `python -c`, stdin, exec() of a string or the "
        "Python prompt; put the kernel in a .py file and import it."
    )
    assert isinstance(info.value.__cause__, OSError)


def test_bad_options_are_refused_before_any_work(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    bad_regex = "--filter '(' is not a regular expression (missing ), unterminated subpattern at position 0)"
    assert (
        _one_line_error(capsys, ["check", "--filter", "("])
        == f"tpu-kernels check: {bad_regex}; escape special characters with a backslash"
    )
    err = _one_line_error(capsys, ["check", "--json", str(tmp_path)])
    assert (
        err
        == f"tpu-kernels check: --json {tmp_path}: is a folder; give a file path, e.g. {tmp_path / 'report.json'}"
    )
    err = _one_line_error(capsys, ["check", "--json", str(afile / "c.json")])
    assert err.endswith(
        f"--json {afile / 'c.json'}: is inside {afile}, which is a file, not a folder; give another path"
    )
    err = _one_line_error(capsys, ["bench", "--filter", "(", str(tmp_path)])
    assert err.startswith(f"tpu-kernels bench: {bad_regex}")
    err = _one_line_error(capsys, ["bench", "--out", str(afile), str(tmp_path)])
    assert (
        err
        == f"tpu-kernels bench: --out {afile}: is a file, not a folder; give a folder (it is created if missing)"
    )


# ---- errors of a call, by kind (tpu_kernels.errors; docs/troubleshooting.md "Error classes") ----


def _raised(call) -> BaseException:
    with pytest.raises(TpuKernelsError) as info:
        call()
    return info.value


def _call_errors() -> list[tuple[str, object, type, str]]:
    from tpu_kernels.kernels import matmul, rmsnorm, softmax

    @tpu_kernel(uname("strict"), noncontiguous="error")
    def strict(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    x = torch.randn(8, 128)
    return [
        (
            "an integer tensor",
            lambda: softmax(x.int()),
            InvalidArgumentTypeError,
            "softmax: argument 'x' has dtype int32",
        ),
        (
            "a dtype JAX lacks",
            lambda: softmax(x.to(torch.complex64)),
            InvalidArgumentTypeError,
            "which tpu_kernels cannot pass",
        ),
        (
            "None for a tensor",
            lambda: strict(None),
            InvalidArgumentTypeError,
            "argument 'x' must be a Tensor",
        ),
        (
            "a wrong shape",
            lambda: rmsnorm(x, torch.randn(64)),
            InvalidArgumentError,
            "rmsnorm: weight must have shape",
        ),
        (
            "mismatched dims",
            lambda: matmul(torch.randn(8, 128), torch.randn(64, 128)),
            InvalidArgumentError,
            r"matmul: expected a \[M, K\]",
        ),
        ("a strided input", lambda: strict(x.t()), InvalidArgumentError, "argument 'x' is not contiguous"),
        (
            "a device without a kernel",
            lambda: strict(x.to_sparse()),
            UnsupportedError,
            r"no kernel for tensors on cpu \(torch.sparse_coo\)",
        ),
    ]


@pytest.mark.parametrize(
    "case", range(7), ids=lambda i: ["int", "complex", "none", "shape", "dims", "strided", "sparse"][i]
)
def test_a_bad_call_raises_its_kind_and_stays_a_tpu_kernels_error(case):
    what, call, kind, message = _call_errors()[case]
    e = _raised(call)
    assert type(e) is kind, (what, type(e).__mro__)
    assert isinstance(e, KernelError)  # what these calls raised before they were sorted by kind
    assert isinstance(
        e,
        {
            InvalidArgumentError: ValueError,
            InvalidArgumentTypeError: TypeError,
            UnsupportedError: NotImplementedError,
        }[kind],
    )
    assert re.search(message, str(e)), (what, str(e))


def test_a_kernels_own_check_keeps_its_kind_and_other_failures_stay_kernel_errors():
    assert wrapping(ValueError()) is InvalidArgumentError
    assert wrapping(TypeError()) is InvalidArgumentTypeError
    assert wrapping(NotImplementedError()) is UnsupportedError  # a RuntimeError, sorted first
    assert wrapping(RuntimeError()) is KernelError
    assert wrapping(ZeroDivisionError()) is KernelError


def test_errors_of_a_bucketed_op_name_the_shapes_the_caller_passed():
    from tpu_kernels.kernels import rmsnorm, softmax

    # bucket_rows' powers_of_two(128) pads 4 rows to 8 (the float32 sublane tile), so a
    # message naming 8 rows would be the padded shape
    e = _raised(lambda: softmax(torch.ones(4, 8, dtype=torch.int32)))
    assert "failed for x=int32[4, 8], block_rows=None" in str(e) and "[8, 8]" not in str(e), str(e)
    assert not getattr(e, "__notes__", None)  # nothing else names the padded shape
    e = _raised(lambda: rmsnorm(torch.randn(4, 8), torch.randn(7)))
    assert type(e) is InvalidArgumentError
    assert "failed for x=float32[4, 8], weight=float32[7]" in str(e), str(e)
    # the kernel's own words name the shape it saw; the note says why
    assert "for x of shape (8, 8)" in str(e)
    assert e.__notes__ == [
        "tpu_kernels::rmsnorm pads its bucketed dims (4 -> 8) before the kernel runs ('x' (4, 8) "
        "-> (8, 8)): the shapes the kernel's own words name are the padded ones."
    ]


@needs_tokamax
def test_a_tokamax_functions_input_error_names_the_function_called():
    import tpu_kernels.tokamax as tk

    x = torch.randn(4, 8)
    # rms_norm forwards to layer_norm (one op); its errors name rms_norm, the function called
    with pytest.raises(ValueError, match=r"^tokamax.rms_norm: weight must have shape \(x.shape\[-1\],\) = \(8,\)"):
        tk.rms_norm(x, torch.randn(7))
    with pytest.raises(ValueError, match=r"^tokamax.rms_norm: dim=2 is out of range"):
        tk.rms_norm(x, torch.randn(8), dim=2)
    with pytest.raises(ValueError, match=r"^tokamax.layer_norm: bias must have shape"):
        tk.layer_norm(x, torch.randn(8), torch.randn(7))


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged])
@pytest.mark.parametrize("route", ["positional", "keyword", "list"])
def test_a_nested_tensor_is_named_not_an_internal_error(layout, route):
    """torch said "Internal error: NestedTensorImpl doesn't support sizes. Please file an
    issue" from the eager shortcut (strided layout), or a bare NotImplementedError (jagged)."""
    nt = torch.nested.nested_tensor([torch.ones(2, 8), torch.ones(3, 8)], layout=layout)
    if route == "list":
        call, name = (lambda: _stack_rows([torch.ones(2, 8), nt])), "xs"
    elif route == "keyword":
        call, name = (lambda: double(x=nt)), "x"
    else:
        call, name = (lambda: double(nt)), "x"
    with pytest.raises(UnsupportedError) as caught:
        call()
    message = str(caught.value)
    op = "user_errors::stack_rows" if route == "list" else "user_errors::double"
    assert message.startswith(f"{op}: argument '{name}' is a nested tensor ({layout} layout, 2 components)")
    assert f"{name}.unbind()" in message and "to_padded_tensor" in message
    double(torch.ones(2, 8))  # a dense tensor still takes the shortcut


@tpu_kernel("user_errors::stack_rows")
def _stack_rows(xs: list[torch.Tensor]) -> torch.Tensor:
    import jax.numpy as jnp

    return jnp.concatenate(xs)
