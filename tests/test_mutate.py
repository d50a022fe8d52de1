"""The mutation tool (python -m tpu_kernels.mutate): its catalogues (the shipped kernels', the
templates') stay applicable, its operators skip comments and docstrings, one mutant is caught
while a no-op survives, and a run that says nothing about a mutant (a timeout, a collection
error, a crash, an error outside a test) is undetermined, not caught. The runs here are tiny
fake repositories, not real mutants. The full campaigns (scripts/mutate, --templates) are not
part of CI: they take 15-60 minutes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tpu_kernels import scaffold
from tpu_kernels.mutate import SHIPPED, TEMPLATES, TOOLKIT, Mutation, generate, run_mutant, run_mutants
from tpu_kernels.mutate.__main__ import main
from tpu_kernels.mutate.catalogue import matmul as matmul_catalogue
from tpu_kernels.mutate.runner import (
    CAUGHT,
    SURVIVED,
    UNDETERMINED,
    Limits,
    Reported,
    apply,
    classify_check,
    classify_tests,
    junit_problems,
    scratch_copy,
)
from tpu_kernels.mutate.templates import kernel_name, rendered_text, variants

ROOT = Path(__file__).resolve().parents[1]


def test_catalogue_is_large_unique_and_applies_to_the_current_kernels():
    assert len(SHIPPED) >= 25
    assert len({m.id for m in SHIPPED}) == len(SHIPPED)
    for m in SHIPPED:
        text = (ROOT / m.file).read_text()
        assert text.count(m.old) == 1, (
            f"{m.id}: stale, {m.old!r} occurs {text.count(m.old)} times in {m.file}"
        )
        # `tpu-kernels check` lowers torch ops: a kernel that is not one yet (matmul's gated
        # kernels, the residual epilogue) is judged by its tests alone
        assert m.old != m.new and m.tests and (m.check or m.file in matmul_catalogue.WITHOUT_TORCH_OP
                                               or m.id in matmul_catalogue.EPILOGUE_MUTANTS)


ISSUE_39_SURVIVORS = {
    "cache-digest-skips-outputs",
    "cache-read-follows-links",
    "buckets-pad-with-zero",
    "eager-try-all-keeps-int-for-float",
    "fake-cache-keyed-on-shapes-only",
    "correctness-max-norm-over-2-norm",
    "correctness-baseline-factor-100x",
    "torchtitan-rmsnorm-eps-none-1e-6",
    "hf-attention-causal-decode-default",
}


def test_toolkit_catalogue_applies_names_existing_tests_and_holds_issue_39s_survivors():
    """The toolkit's mutants (cache, eager shortcut, fakes, buckets, correctness verdict,
    integrations) name tests only (the TPU check judges kernels), each test file exists, each
    text occurs once; issue 39's ten survivors and the run's fresh edits over every module."""
    ids = [m.id for m in TOOLKIT]
    assert len(set(ids)) == len(ids) and not set(ids) & {m.id for m in SHIPPED}
    assert ISSUE_39_SURVIVORS <= set(ids) and len(ids) >= len(ISSUE_39_SURVIVORS) + 12
    modules = {m.file for m in TOOLKIT}
    for module in (
        "cache/",
        "eager.py",
        "fake.py",
        "buckets.py",
        "bench/correctness.py",
        "compare.py",
        "integrations/",
    ):
        assert any(module in f for f in modules), module
    for m in TOOLKIT:
        text = (ROOT / m.file).read_text()
        assert text.count(m.old) == 1, (
            f"{m.id}: stale, {m.old!r} occurs {text.count(m.old)} times in {m.file}"
        )
        assert m.old != m.new and m.tests and m.check is None
        for test in m.tests:
            assert (ROOT / test.split("::")[0]).is_file(), (m.id, test)


ISSUE_46_SURVIVORS = {  # and its faults 5 and 6 (tuning tables)
    "tuner-tie-ceiling-fastest-median",
    "tuner-any-fixed-tunable",
    "tuner-own-value-never-measured",
    "predict-block-copies-off-by-one",
    "predict-step-overhead-in-ms",
    "predict-float32-at-bf16-peak",
    "lookup-oldest-other-version",
    "lookup-versions-as-strings",
    "lookup-table-beside-kernel-wins",
    "lookup-memo-forgets-given-tunables",
    "lookup-predicted-replaces-measured-in-memory",
    "lookup-autotune-skips-nearest",
    "lookup-reads-without-candidate-types",
    "table-types-by-isinstance",
    "table-open-blocks",
    "table-reads-any-file-kind",
    "chip-name-v5litepod-is-v5p",
    "vmem-whole-array-double-buffered",
    "target-v5p-scoped-32-mib",
}


def test_toolkit_catalogue_holds_issue_46s_survivors():
    assert ISSUE_46_SURVIVORS <= {m.id for m in TOOLKIT}


ISSUE_59_SURVIVORS = {  # its items 1-4: each survived the tests as a one-line mutation
    "softmax-chunk-search-stops-at-two-lanes",
    "rmsnorm-backward-temporaries-undercounted",
    "row-footprint-column-unpadded",
    "matmul-default-block-below-the-mxu",
}


def test_catalogue_holds_issue_59s_survivors_with_tests_that_exist():
    shipped = {m.id: m for m in SHIPPED}
    assert ISSUE_59_SURVIVORS <= set(shipped)
    for id in ISSUE_59_SURVIVORS:
        assert all((ROOT / t.split("::")[0]).is_file() for t in shipped[id].tests), id


ISSUE_59 = {  # the chip runner's two figure bugs, at each place they are computed
    "chip-normwise-over-output-norm",
    "chip-speed-inverted",
    "chip-speed-in-program-inverted",
    "chip-layer-speed-inverted",
    "chip-report-speed-up-inverted",
}


def test_toolkit_catalogue_holds_issue_59s_figures_and_its_fresh_edits():
    """Issue 59's bug classes, and its fresh edits of the chip corpus, its fit, the three-pass
    dot's hook into Pallas tracing and the layer's gradient comparison."""
    toolkit = {m.id: m for m in TOOLKIT}
    assert ISSUE_59 <= set(toolkit)
    files = {m.file for m in TOOLKIT}
    for f in ("chip/corpus.py", "bench/chip_tuning.py", "mosaic_precision.py", "_compat.py", "chip/layer.py"):
        assert sum(f in m.file for m in TOOLKIT if m.id not in ISSUE_59) >= 1, f
    assert "tpu_kernels/chip/measure.py" in files


def test_templates_catalogue_covers_every_variant_and_applies_to_the_rendered_kernels():
    """Every (template, backend) pair `tpu-kernels new` offers has mutants, each of which finds
    its text exactly once in the file the template renders."""
    pairs = {(t, b) for t, tpl in scaffold.list_templates().items() for b in tpl.backends}
    assert set(variants()) == pairs
    assert len({m.id for m in TEMPLATES}) == len(TEMPLATES)
    for m in TEMPLATES:
        text = rendered_text(m)
        assert text.count(m.old) == 1, f"{m.id}: stale, {m.old!r} occurs {text.count(m.old)} times"
        assert m.old != m.new and kernel_name(m.template, m.backend) in {kernel_name(*p) for p in pairs}
    ids = " ".join(m.id for m in TEMPLATES)  # the survivors issue #23 measured
    for kind in ("flash_attention-pallas-causal-skip-first-row", "elementwise-helion-result-dtype-from-x"):
        assert kind in ids
    assert "row_reduction-pallas-block-ignores-itemsize" in ids


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


def test_a_mutant_is_caught_a_no_op_survives_and_the_tree_is_untouched(tmp_path, fast_pytest):
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
    assert main(["--toolkit", "--list"]) == 0
    listed = capsys.readouterr().out
    assert "cache-key-without-compile-options" in listed and "matmul-parallel-k" not in listed
    assert main(["--toolkit", "--templates", "--list"]) == 2
    assert "give one of FILE, --templates and --toolkit" in capsys.readouterr().err
    (tmp_path / "k.py").write_text("x = 1\n")
    assert main([str(tmp_path / "k.py")]) == 2
    assert "give the tests of FILE with --tests" in capsys.readouterr().err


def test_a_users_kernel_file_end_to_end(tmp_path, capsys, monkeypatch, fast_pytest):
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


# ---- verdicts: caught, survived, undetermined ----


def test_a_test_failure_is_caught_anything_else_that_is_not_a_pass_is_undetermined():
    fail = [Reported("t::test_f", "failure", "AssertionError: assert 3 == 2")]
    assert classify_tests(1, fail, "", 60).verdict == CAUGHT
    assert "test_f" in classify_tests(1, fail, "", 60).detail
    assert classify_tests(0, [], "", 60).verdict == SURVIVED
    undetermined = {
        "tests timed out after 60 s": (None, None),
        "no tests collected": (5, []),
        "collection error": (2, None),
        "crashed (SIGSEGV)": (-11, None),
        "pytest exited with status 3": (3, None),
        "pytest wrote no report": (1, None),
        "an error, not a test failure: t::test_f: fixture": (1, [Reported("t::test_f", "error", "fixture")]),
        "the test harness failed to import": (
            1,
            [Reported("t::test_f", "failure", "ModuleNotFoundError: No module named 'tpu_kernels'")],
        ),
    }
    for words, (rc, report) in undetermined.items():
        step = classify_tests(rc, report, "ERROR collecting t.py", 60)
        assert step.verdict == UNDETERMINED and words in step.detail, (words, step)


def test_the_check_catches_with_exit_status_1_only():
    assert classify_check(1, "FAILED  op  VMEM", 60).verdict == CAUGHT
    assert classify_check(0, "", 60).verdict == SURVIVED
    for rc, words in ((2, "exited with status 2"), (None, "timed out after 60 s"), (-9, "SIGKILL")):
        step = classify_check(rc, "could not import kern", 60)
        assert step.verdict == UNDETERMINED and words in step.detail


def test_junit_reports_tell_failures_from_errors():
    xml = """<testsuites><testsuite>
      <testcase classname="test_k" name="test_ok"/>
      <testcase classname="test_k" name="test_bad"><failure message="assert 1 == 2">...</failure></testcase>
      <testcase classname="test_k" name="test_setup"><error message="failed on setup">...</error></testcase>
    </testsuite></testsuites>"""
    assert junit_problems(xml) == [
        Reported("test_k::test_bad", "failure", "assert 1 == 2"),
        Reported("test_k::test_setup", "error", "failed on setup"),
    ]


FAKE_KERNEL = "import os\nimport time\n\n\ndef f(x):\n    return x + 1  # one\n\n\ndef g():\n    return 0\n"
FAKE_TESTS = """import pytest
from kern import f, g


@pytest.fixture
def base():
    return g()


def test_f(base):
    assert f(1) + base == 2
"""


@pytest.fixture
def fast_pytest(monkeypatch):
    """The fake runs' pytest without the environment's auto-loaded plugins (jaxtyping's imports
    JAX: seconds per run); xdist stays, for the runner's `-n 0`."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("PYTEST_PLUGINS", "xdist.plugin")


def _fake(id: str, old: str, new: str) -> Mutation:
    return Mutation(id, "kern.py", old, new, id, ("test_kern.py",))


def test_fake_runs_classify_each_kind_of_result(tmp_path, fast_pytest):
    """One campaign over a tiny repository: a failing test catches; a no-op survives; a module
    that does not import, a hang past the baseline's limit, a crash and an error in a fixture
    are undetermined, each saying why."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "kern.py").write_text(FAKE_KERNEL)
    (root / "test_kern.py").write_text(FAKE_TESTS)
    mutants = [
        _fake("fails", "x + 1", "x + 2"),
        _fake("no-op", "# one", "# uno"),
        _fake("import-error", "def f(x):", "def f(x)"),
        _fake("hangs", "return x + 1", "time.sleep(60)"),
        _fake("crashes", "return x + 1", "os.abort()"),
        _fake("fixture-error", "return 0", "raise RuntimeError('setup')"),
    ]
    seen = []
    outcomes = run_mutants(mutants, root, limits=Limits(1.0, 4.0), echo_baseline=seen.append)
    assert [b.what for b in seen] == ["check", "tests"] and all(b.passed for b in seen)
    got = {o.mutation.id: o for o in outcomes}
    assert got["fails"].verdict == CAUGHT and got["fails"].caught_by == "tests"
    assert got["no-op"].verdict == SURVIVED
    expected = {
        "import-error": "collection error",
        "hangs": "tests timed out after",
        "crashes": "crashed (SIGABRT)",
        "fixture-error": "an error, not a test failure",
    }
    for id, words in expected.items():
        assert got[id].verdict == UNDETERMINED and words in got[id].detail, (id, got[id])
    limit = float(re.search(r"timed out after (\d+) s", got["hangs"].detail)[1])
    assert 4 <= limit <= seen[1].step.seconds + 5  # 1 x the baseline + 4 s, not a fixed constant
    assert got["hangs"].seconds < 30
    assert (root / "kern.py").read_text() == FAKE_KERNEL


def test_a_failing_baseline_makes_its_mutants_undetermined_unrun(tmp_path, fast_pytest):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "kern.py").write_text(FAKE_KERNEL)
    (root / "test_kern.py").write_text(FAKE_TESTS.replace("== 2", "== 3"))
    [outcome] = run_mutants([_fake("fails", "x + 1", "x + 2")], root)
    assert outcome.verdict == UNDETERMINED and outcome.seconds == 0
    assert "without the mutant the tests did not pass (FAILED test_kern::test_f" in outcome.detail


def test_the_summary_lists_undetermined_mutants_apart_from_the_score(
    tmp_path, capsys, monkeypatch, fast_pytest
):
    """`python -m tpu_kernels.mutate kern.py --tests ...`: the generic `sign` mutant makes the
    loop endless; the run times out, is reported undetermined and is left out of the score."""
    (tmp_path / "kern.py").write_text(
        "def f(x):\n    n = x - 1\n    while n > 100:\n        pass\n    return n\n"
    )
    (tmp_path / "test_kern.py").write_text("from kern import f\n\n\ndef test_f():\n    assert f(100) == 99\n")
    monkeypatch.chdir(tmp_path)
    argv = ["kern.py", "--tests", "test_kern.py", "--check", "--timeout-factor", "1", "--timeout-margin", "3"]
    assert main(argv) == 1  # no mutant determined: no score to meet the target
    out = capsys.readouterr().out
    assert "score: 0 of 0 caught (0%); 1 undetermined, left out of the score" in out
    assert re.search(
        r"undetermined \(the run said nothing about the mutant\):\n  sign@kern.py:2: tests timed out", out
    )
