"""`tpu-kernels tune`: its three kinds of target, what it writes, and its exit statuses."""

import json
import sys
import textwrap

import pytest

from tpu_kernels import cli
from tpu_kernels.tunables import table

MODULE = textwrap.dedent(
    """
    import torch
    from tests.tuning.kernels import make_op

    op = make_op("tunecli_{n}::double", candidates=(8, 64), default=8)

    def step():
        op(torch.randn(100, 128))
    """
)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module `tunecli_<n>` on sys.path defining a tunable op and a step() that calls it."""
    n = len([m for m in sys.modules if m.startswith("tunecli_")])
    name = f"tunecli_{n}"
    (tmp_path / f"{name}.py").write_text(MODULE.format(n=n))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_a_function_target_is_tuned_and_its_table_written(user_module, tmp_path, capsys):
    out, result = tmp_path / "tables", tmp_path / "result.json"
    assert cli.main(["tune", f"{user_module}:step", "--quick", "--out", str(out), "--json", str(result)]) == 0
    text = capsys.readouterr().out
    assert "tuning 1 op call(s)" in text and "chosen: block_rows=" in text
    path = out / table.filename(f"{user_module}::double")
    assert f"table written: {path}" in text
    (entry,) = json.loads(path.read_text())["entries"]
    assert entry["chip"] == "cpu" and entry["source"] == "measured"
    assert list(json.loads(result.read_text())) == [f"{user_module}::double"]


def test_a_suite_target_tunes_the_op_under_test_at_each_point(tmp_path, capsys):
    suite = tmp_path / "suite_tune.py"
    suite.write_text(
        textwrap.dedent(
            """
            import torch
            from tpu_kernels import bench
            from tests.tuning.kernels import make_op

            op = make_op("tunecli_suite::double", candidates=(8, 64), default=8)

            def benchmarks(quick, device_type):
                return [bench.kernel_benchmark(
                    "double", op, inputs=lambda p, dev: (torch.randn(*p["shape"], device=dev),),
                    points=bench.grid(shape=[(64, 128), (300, 128)]), reference=lambda x: 2 * x,
                    quick=quick, device_type=device_type)]
            """
        )
    )
    assert cli.main(["tune", str(suite), "--no-save", "--rounds", "2"]) == 0
    text = capsys.readouterr().out
    assert "tuning 2 op call(s)" in text  # one per point: two shape buckets
    assert "bucket=[(64, 128)]" in text and "bucket=[(512, 128)]" in text
    assert "table written" not in text


def test_a_module_target_predicts_its_examples_for_tpu_chips(tmp_path, capsys, monkeypatch):
    (tmp_path / "tunecli_examples.py").write_text(
        textwrap.dedent(
            """
            import jax
            from tests.tuning.kernels import make_op

            op = make_op(
                "tunecli_examples::double", candidates=(8, 256, 8192), default=8,
                examples=lambda: [((jax.ShapeDtypeStruct((8192, 4096), "bfloat16"),), {})],
            )
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.main(["tune", "tunecli_examples", "--chips", "v6e", "--no-save"]) == 0
    text = capsys.readouterr().out
    assert "chip=v6e (predicted)" in text and "pruned" in text and "chosen: block_rows=256" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tune", "no_such_module_xyz"], r"cannot import 'no_such_module_xyz'"),
        (["tune", "tests.tuning.kernels:nope"], r"tests.tuning.kernels has no function 'nope'"),
        (["tune", "tests.tuning.conftest"], r"tests.tuning.conftest defines no op with tune= and examples="),
        (["tune", "x:y", "--filter", "("], r"--filter '\(' is not a regular expression"),
    ],
)
def test_usage_errors_exit_2_and_say_why(argv, message, capsys):
    assert cli.main(argv) == 2
    import re

    assert re.search(message, capsys.readouterr().err)
