"""`tpu-kernels new`: every template renders, lints clean, and its generated tests pass."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tpu_kernels import scaffold, template_files
from tpu_kernels.cli import main

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = sorted(scaffold.list_templates())
# Every (template, backend) pair that exists: CI renders and tests each.
VARIANTS = [(t, b) for t, tpl in sorted(scaffold.list_templates().items()) for b in tpl.backends]
BACKENDS = sorted({b for _, b in VARIANTS})
RUFF = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))


def kernel_name(prefix: str, template: str, backend: str) -> str:
    return f"{prefix}_{template}" + ("" if backend == "pallas" else f"_{backend}")


def render_all(dest: Path, prefix: str, backends: list[str] = BACKENDS) -> dict[tuple[str, str], list[Path]]:
    """Every (template, backend) variant rendered into `dest` as kernel `<prefix>_<template>`
    (`<prefix>_<template>_<backend>` for backends other than pallas); a prefix per test: the
    packages a test imports stay in sys.modules, and a name is rendered only once."""
    return {
        (t, b): scaffold.new(kernel_name(prefix, t, b), t, backend=b, dest=dest, namespace=f"tpl_{prefix}")
        for t, b in VARIANTS
        if b in backends
    }


def test_the_four_templates_are_listed_with_their_backends(capsys):
    assert set(TEMPLATES) == {"elementwise", "row_reduction", "matmul", "flash_attention"}
    assert set(VARIANTS) == {(t, "pallas") for t in TEMPLATES} | {
        (t, "helion") for t in ("elementwise", "row_reduction", "matmul")
    }
    assert main(["new", "--list"]) == 0
    out = capsys.readouterr().out
    for t in TEMPLATES:
        backends = ", ".join(b for b in scaffold.BACKENDS if (t, b) in VARIANTS)
        assert re.search(rf"^{t} +\[{backends}\]  \S", out, re.M), out


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _written(kernel_file: str) -> list[str]:
    """What `tpu-kernels new my_kernel` writes: the package with the backend's kernel file,
    its test and its benchmark."""
    package = ["__init__.py", kernel_file, "reference.py", "shapes.py"]
    return sorted(["bench/my_kernel.py", *(f"my_kernel/{f}" for f in package), "tests/test_my_kernel.py"])


def test_rendering_writes_package_tests_and_bench(tmp_path, capsys):
    assert main(["new", "my_kernel", "--template", "matmul", "--dir", str(tmp_path)]) == 0
    assert _files(tmp_path) == _written("pallas.py")
    init = (tmp_path / "my_kernel" / "__init__.py").read_text()
    assert '"mylib::my_kernel",' in init and "my_kernel.def_backward(pallas.my_kernel_backward)" in init
    assert "python -m pytest tests/test_my_kernel.py" in capsys.readouterr().out


def test_rendering_a_helion_variant(tmp_path, capsys):
    args = ["new", "my_kernel", "-t", "row_reduction", "--backend", "helion", "--dir", str(tmp_path)]
    assert main(args) == 0
    assert _files(tmp_path) == _written("helion_kernel.py")
    init = (tmp_path / "my_kernel" / "__init__.py").read_text()
    assert "my_kernel.def_backward(\n    helion_kernel.my_kernel_backward," in init
    assert "@helion.kernel(" in (tmp_path / "my_kernel" / "helion_kernel.py").read_text()
    assert "helion_cpu_mode" in (tmp_path / "tests" / "test_my_kernel.py").read_text()
    assert "from the row_reduction template (helion)" in capsys.readouterr().out


def test_no_placeholder_is_left_and_all_templates_lint_clean(tmp_path):
    # Short and long names: the generated code must be formatted whatever the name's length.
    written = list(render_all(tmp_path, "s").values()) + list(
        render_all(tmp_path, "a_longer_kernel_name").values()
    )
    for paths in written:
        for p in paths:
            assert "{{" not in p.read_text() and "{{" not in str(p), p
    if not Path(RUFF).exists():
        pytest.skip("ruff is not installed")
    config = str(ROOT / "pyproject.toml")
    # From the generated folder, where tpu_kernels is a third-party import, as in a user's project.
    lint = subprocess.run(
        [RUFF, "check", "--config", config, "."], cwd=tmp_path, capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout
    fmt = subprocess.run(
        [RUFF, "format", "--check", "--config", config, "."], cwd=tmp_path, capture_output=True, text=True
    )
    assert fmt.returncode == 0, fmt.stdout


def test_existing_files_are_never_overwritten(tmp_path, capsys):
    args = ["new", "my_norm", "-t", "row_reduction", "--dir", str(tmp_path)]
    assert main(args) == 0
    kernel = tmp_path / "my_norm" / "pallas.py"
    kernel.write_text("# edited by hand\n")
    (tmp_path / "bench" / "my_norm.py").unlink()
    assert main(args) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert kernel.read_text() == "# edited by hand\n"
    assert not (tmp_path / "bench" / "my_norm.py").exists()  # nothing written at all


@pytest.mark.parametrize(
    "name, message",
    [
        ("MyKernel", "must be a lowercase Python identifier"),
        ("2fast", "must be a lowercase Python identifier"),
        ("my-kernel", "must be a lowercase Python identifier"),
        ("lambda", "is a Python keyword or the name of a module"),
        ("pallas", "is a Python keyword or the name of a module"),
        ("torch", "is a Python keyword or the name of a module"),
        ("json", "is a Python keyword or the name of a module"),
        ("xdist", "is already importable"),
    ],
)
def test_names_are_validated(tmp_path, capsys, name, message):
    assert main(["new", name, "-t", "elementwise", "--dir", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_flash_attention_has_no_helion_variant(tmp_path, capsys):
    assert (
        main(["new", "my_attn", "-t", "flash_attention", "--backend", "helion", "--dir", str(tmp_path)]) == 2
    )
    err = capsys.readouterr().err
    assert "template 'flash_attention' has no helion variant; it has: pallas." in err
    assert not any(tmp_path.iterdir())
    assert main(["new", "my_attn", "-t", "matmul", "--backend", "triton", "--dir", str(tmp_path)]) == 2
    assert "unknown backend 'triton'; choose from pallas, helion." in capsys.readouterr().err


def test_unknown_template_and_namespace(tmp_path, capsys):
    assert main(["new", "my_add", "-t", "conv", "--dir", str(tmp_path)]) == 2
    assert "unknown template 'conv'; choose from" in capsys.readouterr().err
    assert main(["new", "my_add", "-t", "matmul", "--namespace", "aten", "--dir", str(tmp_path)]) == 2
    assert "namespace 'aten' must be a Python identifier other than" in capsys.readouterr().err


def test_a_backend_file_replaces_the_common_file_of_the_same_path(tmp_path):
    """A Helion variant brings its own kernel, registration, tests and shapes; the benchmark
    (and, for row_reduction, the reference) come from common/."""
    files = scaffold.plan("my_norm", "row_reduction", backend="helion", dest=tmp_path)
    helion_dir, common_dir = (ROOT / "templates" / "row_reduction" / d for d in ("helion", "common"))
    sources = {
        "my_norm/helion_kernel.py": helion_dir / "{{name}}" / "helion_kernel.py.tmpl",
        "tests/test_my_norm.py": helion_dir / "tests" / "test_{{name}}.py.tmpl",
        "my_norm/shapes.py": helion_dir / "{{name}}" / "shapes.py.tmpl",
        "my_norm/reference.py": common_dir / "{{name}}" / "reference.py.tmpl",
        "bench/my_norm.py": common_dir / "bench" / "{{name}}.py.tmpl",
    }
    for rel, src in sources.items():
        expected = scaffold.render(
            src.read_text(),
            {
                "name": "my_norm",
                "namespace": "mylib",
                "op": "mylib::my_norm",
                "template": "row_reduction",
                "backend": "helion",
            },
        )
        assert files[tmp_path / rel] == expected, rel
    assert tmp_path / "my_norm" / "pallas.py" not in files


def test_a_backend_is_a_folder(tmp_path, monkeypatch):
    """Adding templates/<t>/<backend>/ makes --backend render it (common files shared)."""
    root = tmp_path / "templates"
    shutil.copytree(ROOT / "templates" / "flash_attention", root / "flash_attention")
    kernel = root / "flash_attention" / "helion" / "{{name}}" / "helion_kernel.py.tmpl"
    kernel.parent.mkdir(parents=True)
    kernel.write_text('"""{{name}} for {{backend}}"""\n')
    monkeypatch.setenv(template_files.ENV, str(root))
    assert scaffold.list_templates()["flash_attention"].backends == ("pallas", "helion")
    files = scaffold.plan("my_attn", "flash_attention", backend="helion", dest=tmp_path / "out")
    names = sorted(str(p.relative_to(tmp_path / "out")) for p in files)
    assert names == [
        "bench/my_attn.py",
        "my_attn/helion_kernel.py",
        "my_attn/reference.py",
        "my_attn/shapes.py",
        "tests/test_my_attn.py",
    ]
    assert files[tmp_path / "out" / "my_attn" / "helion_kernel.py"] == '"""my_attn for helion"""\n'


def test_unknown_placeholders_are_template_bugs():
    with pytest.raises(scaffold.ScaffoldError, match=r"unknown placeholder \{\{nmae\}\}"):
        scaffold.render("x = {{nmae}}", {"name": "a"})


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_generated_tests_pass_and_every_template_lowers_for_tpu(tmp_path, capsys, backend):
    """CI's check of the templates: render every template that has this backend, run their
    generated tests as a user would (from the generated folder, in a fresh process), then
    `tpu-kernels check` them."""
    variants = [t for t, b in VARIANTS if b == backend]
    render_all(tmp_path, "ci", backends=[backend])
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert re.search(r"\b\d+ passed\b", result.stdout) and "failed" not in result.stdout.splitlines()[-1]

    packages = [str(tmp_path / kernel_name("ci", t, backend)) for t in variants]
    assert main(["check", *packages]) == 0
    out = capsys.readouterr().out
    # The VMEM estimate reads pallas_calls' BlockSpecs; Helion's kernels (inputs in HBM,
    # pipelined inside the kernel) give none, so only Pallas lines must show one.
    vmem = ", VMEM per grid step" if backend == "pallas" else ""
    for t in variants:
        op = f"tpl_ci::{kernel_name('ci', t, backend)}"
        assert re.search(rf"^ok +{op} +\d+ of \d+ calls lowered{vmem}", out, re.M), out
        assert re.search(rf"^ok +{op}_backward ", out, re.M), out


@pytest.mark.slow
def test_generated_bench_suites_load_and_run(tmp_path):
    from tpu_kernels import bench
    from tpu_kernels.bench import discover

    render_all(tmp_path, "bench")
    for t, b in VARIANTS:
        name = kernel_name("bench", t, b)
        suites = discover.load(tmp_path / "bench" / f"{name}.py", quick=True, device_type="cpu")
        assert [s.name for s in suites] == [name]
        # a CPU's default run (the interpreter) times fewer sizes than an accelerator's
        [s] = suites
        assert s.reduced_points and all(p in s.points for p in s.reduced_points), name
        assert len(s.reduced_points) < len(s.points), name
    # One suite per backend end to end, at its quick point with minimal timing (the others
    # differ only in data).
    for b in BACKENDS:
        name = kernel_name("bench", "elementwise", b)
        [suite] = discover.load(tmp_path / "bench" / f"{name}.py", quick=True, device_type="cpu")
        report = bench.run(
            [suite],
            bench.resolve("cpu"),
            bench.Settings(rounds=1, min_sample_s=0.001, warmup_s=0.1, max_input_sets=2),
            quick=True,
        )
        assert all(c.check["passed"] for r in report.results for c in r.candidates if c.primary), name


def test_a_wheel_carries_the_templates_and_the_benchmark_suites(tmp_path):
    """In a wheel there is no checkout: setup.py copies templates/ into tpu_kernels/_templates
    and the suites of bench/ into tpu_kernels/_suites (so `tpu-kernels bench` runs anywhere)."""
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in ("tpu_kernels", "templates", "bench"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", "dist", "."],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    [wheel] = (src / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for t in TEMPLATES:
        assert f"tpu_kernels/_templates/{t}/README.md" in names
    assert "tpu_kernels/_templates/matmul/pallas/{{name}}/pallas.py.tmpl" in names
    assert "tpu_kernels/_templates/matmul/helion/{{name}}/helion_kernel.py.tmpl" in names
    for suite in ("_common", "kernels", "tokamax_ops"):
        assert f"tpu_kernels/_suites/{suite}.py" in names
