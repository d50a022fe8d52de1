"""The docs stay true: their code runs, their links resolve, their error messages exist."""

from __future__ import annotations

import linecache
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ILLUSTRATIVE = "<!-- illustrative -->"
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```(?P<lang>\w*)\n(?P<code>.*?)```", re.S)


def python_blocks(page: Path) -> list[str]:
    text = "\n" + page.read_text()
    return [
        m["code"] for m in BLOCK.finditer(text) if m["lang"] == "python" and ILLUSTRATIVE not in m["before"]
    ]


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.name)
def test_code_blocks_run(page):
    """Each page's Python blocks run in order in one namespace, as a reader would paste them."""
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for i, code in enumerate(python_blocks(page)):
        filename = f"{page.parent}/{page.stem}_block{i}.py"
        # Registered with linecache so inspect.getsource works (Helion reads kernel source).
        linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
        try:
            exec(compile(code, filename, "exec"), namespace)
        except Exception as e:
            raise AssertionError(f"{page.name}, python block {i} failed: {e!r}\n{code}") from e


def _slug(heading: str) -> str:
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", page.read_text(), re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)]+)\)", text):
        if re.match(r"https?://", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: link to missing {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.name}: no heading '#{anchor}' in {dest.name}"


def _source_text() -> str:
    """The package source with implicitly concatenated string literals joined."""
    text = "\n".join(p.read_text() for p in (ROOT / "tpu_kernels").rglob("*.py"))
    return re.sub(r"\"\s*\n\s*f?\"", "", text)


def test_troubleshooting_lists_messages_that_exist():
    source = _source_text()
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| ") and "(torch)" not in line]
    fragments = []
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        cell = cells[1] if cells[0].startswith("`") and cells[0].strip("`").endswith("Error") else cells[0]
        fragments += [f for f in re.findall(r"`([^`]+)`", cell)]
    assert len(fragments) > 30
    missing = [f for f in fragments if f.replace("\\|", "|") not in source]
    assert not missing, f"troubleshooting.md lists messages the code no longer raises: {missing}"


def _readme_axpy(namespace: str, code_edit=lambda code: code):
    """The README's axpy example, registered under another namespace (the page's own test
    registers mylib::axpy in this process)."""
    code = python_blocks(ROOT / "README.md")[0].replace("mylib", namespace)
    ns: dict = {"__name__": f"docs_readme_{namespace}"}
    exec(compile(code_edit(code), f"README_{namespace}.py", "exec"), ns)
    return ns["axpy"]


def test_readme_example_is_right_when_rows_are_not_a_multiple_of_the_block():
    """grid=(x.shape[0] // 8,) left rows 8-11 of a 12-row input unwritten (NaN); pl.cdiv covers them."""
    import jax
    import torch

    from tpu_kernels.errors import InvalidArgumentError
    from tpu_kernels.lowering_check import check_call, chip

    axpy = _readme_axpy("readme_rows")
    for shape in [(12, 128), (4, 128), (13, 100), (1, 1)]:
        x, y = torch.randn(shape), torch.randn(shape)
        torch.testing.assert_close(axpy(x, y, alpha=2.0), x + 2 * y)
    with pytest.raises(
        InvalidArgumentError, match="x and y must be 2-D and of one shape, got \\(12, 128\\) and \\(12, 64\\)"
    ):
        axpy(torch.randn(12, 128), torch.randn(12, 64))
    spec = jax.ShapeDtypeStruct((12, 128), "float32")
    assert check_call(axpy, (spec, spec), {}, chip("v6e")).ok
    # The version the README had: `tpu-kernels check` names the rows it never writes.
    floor = _readme_axpy("readme_floor", lambda c: c.replace("pl.cdiv(x.shape[0], 8)", "x.shape[0] // 8"))
    [problem] = check_call(floor, (spec, spec), {}, chip("v6e")).problems
    assert (
        problem.kind == "coverage"
        and "rows 8-11 of output 0 (shape 12x128) are never written" in problem.message
    )


def _decisions() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.partition("## Decisions\n")[2].partition("\n## ")[0]
    return section.split("\n- ")[1:]


def test_every_architecture_decision_names_tests_that_exist():
    import ast

    decisions = _decisions()
    assert len(decisions) >= 10
    for decision in decisions:
        title = decision.partition("**")[2].partition("**")[0]
        refs = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", decision.partition("Tests:")[2])
        assert refs, f"the decision {title!r} names no test (a 'Tests:' line of tests/...py::test_name)"
        for path, name in refs:
            file = ROOT / path
            assert file.is_file(), f"{title!r}: {path} does not exist"
            names = {n.name for n in ast.walk(ast.parse(file.read_text())) if isinstance(n, ast.FunctionDef)}
            assert name in names, f"{title!r}: {path} has no test {name}"


CORE_FOLDERS = ("definition", "lowering", "runtime", "verification", "dispatch", "sharding", "tunables")


def _package_table() -> list[list[str]]:
    """The first cell of each row of docs/architecture.md's package table, as its paths."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.partition("## The package\n")[2].partition("\n## ")[0]
    cells = [line[2:].partition(" | ")[0] for line in section.splitlines() if line.startswith("| `")]
    return [re.findall(r"`([^`]+)`", cell) for cell in cells]


def test_the_package_table_names_paths_that_exist_and_every_module_of_the_core():
    package = ROOT / "tpu_kernels"
    named: set[Path] = set()
    for paths in _package_table():
        folder = Path()
        for i, rel in enumerate(paths):
            rel = rel.replace("<family>", "softmax" if rel.startswith("kernels") else "attention")
            path = package / rel if i == 0 or "/" in rel else package / folder / rel
            assert path.exists(), f"docs/architecture.md names {rel}, which is not in tpu_kernels/"
            folder = Path(rel).parent if i == 0 else folder
            named.add(path.resolve())

    def covered(p: Path) -> bool:  # named, inside a named folder, or a folder with a named part
        return any(p == n or n in p.parents or p in n.parents for n in named)

    top = [p for p in package.iterdir() if p.name != "__pycache__" and not p.name.startswith(".")]
    missing = [p.name for p in top if (p.suffix == ".py" or p.is_dir()) and not covered(p.resolve())]
    for folder in CORE_FOLDERS:  # each module of the core's folders has a row, or its folder has
        missing += [
            str(p.relative_to(package))
            for p in (package / folder).rglob("*.py")
            if p.name != "__init__.py" and not any(p.resolve() == n or n in p.resolve().parents for n in named)
        ]
    assert not missing, f"docs/architecture.md's package table lacks {missing}"


# ---- README: the front door ----------------------------------------------------------------------

README = ROOT / "README.md"
GENERATED = re.compile(r"<!-- generated: [\w-]+ -->\n.*?<!-- end generated -->", re.S)


def test_readme_is_a_short_product_page_in_a_newcomers_order():
    text = README.read_text()
    assert len(text.encode()) < 10_000, f"README.md is {len(text.encode())} bytes; keep it under 10 kB"
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings == ["Install", "Two commands", "Example", "Features", "Performance", "Documentation"]


def test_readme_maps_every_docs_page():
    section = README.read_text().partition("## Documentation")[2]
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)", section))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages <= linked, f"README's documentation map misses {sorted(pages - linked)}"


def test_readme_commands_are_the_scripts_ci_runs():
    """`bash scripts/bench` and `bash scripts/test`: both set up the environment (scripts/env.sh)
    and run what the README says; CI runs the second."""
    text = README.read_text()
    commands = re.findall(r"^bash (scripts/\w+)", text, re.M)
    assert commands == ["scripts/bench", "scripts/test"]
    for script in commands:
        body = (ROOT / script).read_text()
        assert 'source "$(dirname "${BASH_SOURCE[0]}")/env.sh"' in body, script
    assert 'exec tpu-kernels bench "$@"' in (ROOT / "scripts" / "bench").read_text()
    assert "python -m pytest" in (ROOT / "scripts" / "test").read_text()
    assert "bash scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_the_test_suites_record_runs_what_scripts_test_runs():
    """README's time for `bash scripts/test` comes from `python bench/record.py tests`, which runs
    the script's pytest commands itself (the script would set up its own environment)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_record", ROOT / "bench" / "record.py")
    record = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(record)
    script = (ROOT / "scripts" / "test").read_text()
    runs = [
        line.split("python -m pytest ")[1].replace('"$@"', "").split()
        for line in script.splitlines()
        if "python -m pytest " in line and not line.lstrip().startswith("#")
    ]
    assert runs == [list(r) for r in record.TEST_RUNS]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_dated_measurement_logs(page):
    """Measured figures live in generated regions (tpu_kernels/docs_perf.py renders bench/reports/),
    which say when and at what load they were measured; the prose around them carries no dates
    or load averages of its own."""
    prose = GENERATED.sub("", page.read_text())
    dates = re.findall(r"\b20\d\d-[01]\d-[0-3]\d\b", prose)
    loads = re.findall(r"load average (?:of |at |about )?\d", prose)
    assert not dates and not loads, f"{page.name}: dated or load-stamped prose: {dates + loads}"


_MEASURED = re.compile(
    r"\b\d+(\.\d+)?(-\d+(\.\d+)?)?\s?(us|ms|ns)\b"  # a time
    r"|\b(\d+\.\d+|\d+(\.\d+)?-\d+(\.\d+)?)x (XLA|JAX|faster|slower|of)\b"  # a measured speed ratio (2x: a rule)
    r"|\b\d+(\.\d+)?(-\d+(\.\d+)?)?% of (HBM|the) peak"  # a share of a peak
)
# Figures a generated table or a report prints (their strings are formats, not figures).
_FIGURE_WRITERS = {"docs_perf.py", "docs_tables.py"}


def test_the_packages_docstrings_and_comments_state_rules_not_measured_figures():
    """Issue 61: measured figures live in records and generated tables (docs/performance.md);
    a docstring or comment that quotes one ("384 to 377 us") ages with every run. They say
    the rule and name the record instead. Hardware specs (peaks in TF/s and GB/s) are not
    measurements. Comments and string tokens are scanned; f-strings (messages, reports) are not."""
    import io
    import tokenize

    found = []
    for path in sorted((ROOT / "tpu_kernels").rglob("*.py")):
        rel = path.relative_to(ROOT / "tpu_kernels").as_posix()
        if rel in _FIGURE_WRITERS or rel.startswith("mutate/"):
            continue
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and not tok.string.lstrip("rbRB").startswith(("f", "F"))):
                for m in _MEASURED.finditer(tok.string):
                    found.append(f"{rel}:{tok.start[0]}: {m.group(0)!r}")
    assert not found, "measured figures in docstrings or comments (point to the record instead):\n" + "\n".join(found)


def test_the_figure_scan_finds_times_ratios_and_shares():
    for text in ("took 384 us", "2.15 ms", "0.4-3.5x faster", "1.3x XLA", "76% of HBM peak"):
        assert _MEASURED.search(text), text
    for text in ("197 TF/s bf16", "819 GB/s HBM", "4096^3", "block_ms=3", "within 2x of the floor"):
        assert not _MEASURED.search(text), text


_CALL = re.compile(r"(?:torch\.ops\.)?tpu_kernels(?:\.|::)(?P<name>\w+)\((?P<params>[^()]*)\)")


def _first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def _described_calls(text: str) -> list[tuple[str, list[str], dict[str, str]]]:
    """Each `tpu_kernels.<op>(...)` / `tpu_kernels::<op>(...)` call a text shows: the op's name,
    the parameter names in order, and the values it names (`eps=1e-6`)."""
    out = []
    for m in _CALL.finditer(text):
        names, values = [], {}
        for part in (p.strip() for p in m["params"].split(",")):
            if not part or part in ("*", "..."):
                continue
            name, _, value = part.partition("=")
            names.append(name.strip())
            if value:
                values[name.strip()] = value.strip()
        out.append((m["name"], names, values))
    return out


def test_each_ops_first_docstring_line_agrees_with_its_signature():
    """Issue 61, item 4: the first paragraph of each shipped op's docstring and of its family's
    module names the op's parameters in the signature's order and, where it names a default,
    the default the signature has (a stale "block=256" once sat there); a paragraph that names
    no values passes on its names alone."""
    import ast
    import importlib

    from tpu_kernels.kernels import FAMILIES

    ops = {}
    texts = []
    for fam in FAMILIES.values():
        ops[fam.op.short_name] = fam.op
        texts.append((fam.package, _first_paragraph(importlib.import_module(fam.package).__doc__)))
        texts.append((fam.op.name, _first_paragraph(fam.op.__doc__)))
        if fam.helion:
            twin = fam.helion_op()
            ops[twin.short_name] = twin
            texts.append((fam.helion_module().__name__, _first_paragraph(fam.helion_module().__doc__)))
    seen = 0
    for where, text in texts:
        for name, names, values in _described_calls(text):
            op = ops.get(name)
            assert op is not None, f"{where}: names tpu_kernels.{name}, which is no shipped op"
            params = [p.name for p in op.signature.params]
            assert names == params[: len(names)], f"{where}: {name}({', '.join(names)}) but the op takes {params}"
            defaults = {p.name: p.default for p in op.signature.params}
            for param, value in values.items():
                assert ast.literal_eval(value) == defaults[param], (
                    f"{where}: says {name}'s {param}={value}, the signature's default is {defaults[param]!r}"
                )
            seen += 1
    assert seen >= len(FAMILIES) + sum(bool(f.helion) for f in FAMILIES.values())
