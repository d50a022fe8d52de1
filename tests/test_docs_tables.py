"""The tables in the docs that restate the code are generated from it (tpu_kernels/docs_tables.py):
these tests regenerate them in memory and compare, so a code change that makes a page wrong fails."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import pytest

from tpu_kernels import docs_tables

ROOT = Path(__file__).resolve().parent.parent


def test_generated_tables_match_the_code():
    stale = docs_tables.stale(ROOT)
    assert not stale, (
        f"{', '.join(str(p.relative_to(ROOT)) for p in stale)}: generated tables differ from the code; "
        f"run `{docs_tables.COMMAND}` and commit the result"
    )


def test_every_generator_has_its_region_on_a_page():
    """A region deleted by mistake would silently stop being checked."""
    found = {name for page in docs_tables.pages(ROOT) for name in docs_tables.regions(page.read_text())}
    assert found == set(docs_tables.GENERATORS)


def test_a_code_change_makes_the_check_fail(monkeypatch, tmp_path, capsys):
    """Against a copy of the docs: a changed tolerance makes dtypes.md stale; the command rewrites it."""
    from tpu_kernels import testing

    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copy(ROOT / "docs" / "dtypes.md", tmp_path / "docs" / "dtypes.md")
    assert docs_tables.main(["--check"], root=tmp_path) == 0
    monkeypatch.setitem(testing.TOL, testing.torch.float32, testing.Tol(3e-5, 2e-6))
    assert docs_tables.main(["--check"], root=tmp_path) == 1
    assert "stale: docs/dtypes.md" in capsys.readouterr().out
    assert docs_tables.main([], root=tmp_path) == 0
    assert "| float32 | 3e-5 | 2e-6 |" in (tmp_path / "docs" / "dtypes.md").read_text()
    assert docs_tables.main(["--check"], root=tmp_path) == 0


def test_a_changed_record_makes_the_measured_figures_stale(monkeypatch, tmp_path, capsys):
    """The README's and performance page's figures are the records': a record measured again
    (here: the main job's wall time) leaves both pages stale until they are regenerated."""
    import json

    from tpu_kernels import docs_perf

    reports = tmp_path / "reports"
    shutil.copytree(ROOT / "bench" / "reports", reports)
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copy(ROOT / "docs" / "performance.md", tmp_path / "docs" / "performance.md")
    monkeypatch.setattr(docs_perf, "REPORTS", reports)
    assert docs_tables.main(["--check"], root=tmp_path) == 0
    record = json.loads((reports / "cpu.json").read_text())
    record["wall_s"] = 3600 + 17 * 60
    (reports / "cpu.json").write_text(json.dumps(record))
    assert docs_tables.main(["--check"], root=tmp_path) == 1
    out = capsys.readouterr().out
    assert "stale: README.md" in out and "stale: docs/performance.md" in out
    assert docs_tables.main([], root=tmp_path) == 0
    assert "`bash scripts/bench` took **77.0 min**" in (tmp_path / "README.md").read_text()


def test_an_unknown_region_is_an_error():
    with pytest.raises(KeyError, match="no generator for region 'nope'"):
        docs_tables.render("<!-- generated: nope -->\n<!-- end generated -->\n")


def test_a_new_exit_status_must_be_described(monkeypatch):
    from tpu_kernels.commands import check

    monkeypatch.setattr(check, "EXIT_TIMEOUT", 4, raising=False)
    with pytest.raises(KeyError, match=r"tpu_kernels.commands.check defines \['EXIT_TIMEOUT'\]"):
        docs_tables.cli_reference()


def test_cli_reference_lists_every_option_of_the_parsers():
    text = docs_tables.cli_reference()
    for option in (
        "--races",
        "--chip",
        "--json",
        "--quick",
        "--compare",
        "--markdown",
        "--namespace",
        "--dir",
    ):
        assert f"`{option}" in text
    assert "| 3 | `--compare`: regressions against the baseline |" in text


def test_the_generator_is_not_on_the_import_path():
    """Rendering imports Tokamax, Helion and the benchmark scripts; nothing in the package may
    import it (docs_perf, its renderers of measured figures, only names the command)."""
    generators = {"docs_tables.py", "docs_perf.py"}
    users = [
        p
        for p in (ROOT / "tpu_kernels").rglob("*.py")
        if p.name not in generators and ("docs_tables" in p.read_text() or "docs_perf" in p.read_text())
    ]
    assert not users


# docs/tokamax.md explains why `triton` is missing from three CUDA defaults; this holds it to the install.
JAX_TRITON_KERNELS = {
    "layer_norm": "tokamax._src.ops.normalization.triton",
    "ragged_dot": "tokamax._src.ops.ragged_dot.triton",
    "gated_linear_unit": "tokamax._src.ops.gated_linear_unit.triton",
}


def test_tokamax_triton_defaults_are_explained_by_jax_triton():
    from tpu_kernels import tokamax as tk
    from tpu_kernels.tokamax.implementation import OPS, REGISTERED

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("jax_triton")
    for op, module in JAX_TRITON_KERNELS.items():
        with pytest.raises(ModuleNotFoundError, match="jax_triton"):
            importlib.import_module(module)
        assert "triton" in tk.implementations(op, "cuda") and "triton" in OPS[op].defaults["cuda"]
        assert "triton" not in REGISTERED[op] and "triton" not in tk.resolve_implementation(op, "cuda")
        with pytest.raises(tk.ImplementationError, match="not available on this install"):
            tk.resolve_implementation(op, "cuda", "triton")
    importlib.import_module("tokamax._src.ops.attention.pallas_triton")  # Pallas' Triton backend, in JAX
    assert tk.resolve_implementation("dot_product_attention", "cuda") == "mosaic,triton,xla"
