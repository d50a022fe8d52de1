"""The mutation tool (python -m tpu_kernels.mutate): its catalogue stays applicable, its
operators skip comments and docstrings, and one mutant is caught while a no-op survives.
The full campaign (scripts/mutate) is not part of CI: it takes 15-25 minutes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpu_kernels.mutate import SHIPPED, Mutation, generate, run_mutant
from tpu_kernels.mutate.__main__ import main
from tpu_kernels.mutate.runner import apply, scratch_copy

ROOT = Path(__file__).resolve().parents[1]


def test_catalogue_is_large_unique_and_applies_to_the_current_kernels():
    assert len(SHIPPED) >= 25
    assert len({m.id for m in SHIPPED}) == len(SHIPPED)
    for m in SHIPPED:
        text = (ROOT / m.file).read_text()
        assert text.count(m.old) == 1, (
            f"{m.id}: stale, {m.old!r} occurs {text.count(m.old)} times in {m.file}"
        )
        assert m.old != m.new and m.tests and m.check


def test_catalogue_covers_the_kinds_of_issue_16():
    ids = " ".join(m.id for m in SHIPPED)
    for kind in (
        "bf16-arithmetic",
        "no-max-subtraction",
        "residual-in-input-dtype",
        "oversized-default-block",
        "parallel-k",
        "row_block-no-rounding",
        "dropped-eps",
        "no-preferred-element-type",
        "off-by-one",
        "wrong-scale",
        "low-precision",
    ):
        assert kind in ids, kind


KERNEL = '''"""A docstring with x - y and "arbitrary" in it."""
import jax.numpy as jnp


def body(x, eps=1e-6):
    # a comment: x - y
    acc = jnp.promote_types(x.dtype, jnp.float32)
    return x.astype(acc) - jnp.max(x) + eps, ("parallel", "arbitrary")
'''


def test_operators_mutate_code_not_comments_or_docstrings(tmp_path):
    path = tmp_path / "kern.py"
    path.write_text(KERNEL)
    mutants = generate(path, tmp_path, tests=("t.py",), check=None)
    names = sorted(m.id.split("@")[0] for m in mutants)
    assert names == sorted(["low-precision", "f32-to-bf16", "arbitrary-to-parallel", "drop-eps", "sign"])
    for m in mutants:
        assert KERNEL.count(m.old) == 1
        line = m.new
        assert "docstring" not in line and "comment" not in line
    [sign] = [m for m in mutants if m.id.startswith("sign")]
    assert "x.astype(acc) + jnp.max(x)" in sign.new


def _tiny_repo(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "kern.py").write_text("def f(x):\n    return x + 1  # one\n")
    (tmp_path / "test_kern.py").write_text("from kern import f\n\n\ndef test_f():\n    assert f(1) == 2\n")
    return tmp_path


def test_a_mutant_is_caught_a_no_op_survives_and_the_tree_is_untouched(tmp_path):
    root = _tiny_repo(tmp_path / "repo")
    caught = Mutation("plus-two", "kern.py", "x + 1", "x + 2", "off by one", ("test_kern.py",))
    no_op = Mutation("comment", "kern.py", "# one", "# uno", "a comment", ("test_kern.py",))
    with scratch_copy(root) as copy:
        assert copy != root
        first, second = run_mutant(caught, copy), run_mutant(no_op, copy)
        assert (copy / "kern.py").read_text() == (root / "kern.py").read_text()  # restored
    assert first.caught_by == "tests" and "test_f" in first.detail
    assert not second.caught
    assert (root / "kern.py").read_text() == "def f(x):\n    return x + 1  # one\n"


def test_a_stale_mutant_is_an_error_naming_it(tmp_path):
    root = _tiny_repo(tmp_path)
    with pytest.raises(ValueError, match="mutant gone: 'x - 1' occurs 0 times in kern.py"):
        apply(Mutation("gone", "kern.py", "x - 1", "x", "", ()), root)


def test_cli_lists_the_catalogue_and_refuses_a_file_without_tests(capsys, tmp_path):
    assert main(["--list"]) == 0
    assert "matmul-parallel-k" in capsys.readouterr().out
    (tmp_path / "k.py").write_text("x = 1\n")
    assert main([str(tmp_path / "k.py")]) == 2
    assert "give the tests of FILE with --tests" in capsys.readouterr().err


def test_a_users_kernel_file_end_to_end(tmp_path, capsys, monkeypatch):
    """`python -m tpu_kernels.mutate kern.py --tests tests/test_kern.py` outside git: the copy
    holds the file and its tests, the generic `sign` operator makes one mutant, the test catches it."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "kern.py").write_text("def f(x):\n    return x - 1\n")
    (tmp_path / "tests" / "test_kern.py").write_text(
        "import sys\nfrom pathlib import Path\n\nsys.path.insert(0, str(Path(__file__).parents[1]))\n"
        "from kern import f  # noqa: E402\n\n\ndef test_f():\n    assert f(3) == 2\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["kern.py", "--tests", "tests/test_kern.py", "--check"]) == 0
    out = capsys.readouterr().out
    assert "sign@kern.py:2" in out and "caught by tests" in out and "score: 1 of 1 caught (100%)" in out
