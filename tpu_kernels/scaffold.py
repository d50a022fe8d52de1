"""`tpu-kernels new`: render a kernel template into a package, its tests and its benchmark.

A template is a folder `templates/<template>/` holding

- `README.md`: its first line is the one-line description `tpu-kernels new --list` shows;
- `common/`: files every backend shares (reference, shapes, tests, benchmark);
- `<backend>/` (`pallas/`, `helion/`): the kernel and its registration; a file
  here replaces the `common/` file of the same path (the Helion variants bring
  their own tests and shapes this way).

Every file ends in `.tmpl`, which rendering strips (so linters and pytest leave
the templates alone). Paths and contents may use the placeholders `{{name}}`
(the op and package name), `{{namespace}}` (the torch op namespace), `{{op}}`
(`namespace::name`), `{{template}}` and `{{backend}}`. Rendering `NAME` into
folder `D` gives `D/NAME/` (the package), `D/tests/test_NAME.py` and
`D/bench/NAME.py`. Adding a backend to a template is adding its folder.

The templates are found next to the package in a source checkout (also an
editable install), inside it as `tpu_kernels/_templates` in a wheel, or at
`$TPU_KERNELS_TEMPLATES`.
"""

from __future__ import annotations

import importlib.util
import keyword
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tpu_kernels.template_files import ScaffoldError, render, templates_dir

SUFFIX = ".tmpl"


def _backends() -> tuple[str, ...]:
    from tpu_kernels.runtime import sources  # light: the languages' modules import on first use

    return sources.template_backends()


BACKENDS = _backends()  # a template variant folder per kernel language (sources.Language)
COMMON = "common"

# Names a generated package may not take: its own modules and folders, and what the
# generated code imports (a package of that name would shadow it, or be shadowed).
RESERVED = frozenset(
    {"pallas", "helion", "helion_kernel", "reference", "shapes", "tests", "test", "bench", "templates"}
    | {"common", "tpu_kernels", "torch", "jax", "jaxlib", "numpy", "pytest", "tokamax", "triton", "conftest"}
)
RESERVED_NAMESPACES = frozenset({"aten", "prim", "prims", "torch"})


@dataclass(frozen=True)
class Template:
    name: str
    path: Path
    description: str
    backends: tuple[str, ...]


def list_templates(root: Path | None = None) -> dict[str, Template]:
    root = root or templates_dir()
    found = {}
    for path in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
        readme = path / "README.md"
        description = (
            readme.read_text().strip().splitlines()[0].lstrip("# ").strip() if readme.exists() else ""
        )
        backends = tuple(b for b in BACKENDS if (path / b).is_dir())
        found[path.name] = Template(path.name, path, description, backends)
    return found


def validate_name(name: str, dest: Path | str | None = None) -> None:
    """NAME becomes a package, a module attribute and an op name: a plain lowercase identifier
    that shadows nothing (a module found in `dest` itself is left to the overwrite check)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name or ""):
        raise ScaffoldError(
            f"tpu-kernels new: NAME {name!r} must be a lowercase Python identifier (a-z, 0-9, _; "
            "starting with a letter), like my_softmax."
        )
    if keyword.iskeyword(name) or name in RESERVED or name in sys.stdlib_module_names:
        raise ScaffoldError(
            f"tpu-kernels new: NAME {name!r} is a Python keyword or the name of a module the "
            "generated code uses or would shadow; pick another, like my_" + name + "."
        )
    spec = importlib.util.find_spec(name)
    origin = getattr(spec, "origin", None) or ""
    if spec is not None and not (dest and Path(origin).resolve().is_relative_to(Path(dest).resolve())):
        where = origin or "a namespace package"
        raise ScaffoldError(
            f"tpu-kernels new: a module named {name!r} is already importable ({where}); the generated "
            "package would shadow it or be shadowed by it. Pick another NAME."
        )


def validate_namespace(namespace: str) -> None:
    if not namespace.isidentifier() or keyword.iskeyword(namespace) or namespace in RESERVED_NAMESPACES:
        raise ScaffoldError(
            f"tpu-kernels new: namespace {namespace!r} must be a Python identifier other than "
            f"{', '.join(sorted(RESERVED_NAMESPACES))}, like mylib."
        )


def _backend(template: Template, backend: str) -> None:
    if backend not in BACKENDS:
        raise ScaffoldError(
            f"tpu-kernels new: unknown backend {backend!r}; choose from {', '.join(BACKENDS)}."
        )
    if backend not in template.backends:
        raise ScaffoldError(
            f"tpu-kernels new: template {template.name!r} has no {backend} variant; it has: "
            f"{', '.join(template.backends)}."
        )


def plan(
    name: str, template: str, *, backend: str = "pallas", dest: Path | str = ".", namespace: str = "mylib"
) -> dict[Path, str]:
    """The files `new` would write: {path: content}. Validates everything, writes nothing."""
    validate_name(name, dest)
    validate_namespace(namespace)
    templates = list_templates()
    if template not in templates:
        raise ScaffoldError(
            f"tpu-kernels new: unknown template {template!r}; choose from {', '.join(templates)}."
        )
    t = templates[template]
    _backend(t, backend)
    values = {
        "name": name,
        "namespace": namespace,
        "op": f"{namespace}::{name}",
        "template": template,
        "backend": backend,
    }
    sources: dict[Path, Path] = {}
    for layer in (t.path / COMMON, t.path / backend):  # the backend's files replace common ones
        if layer.is_dir():
            for src in sorted(layer.rglob("*" + SUFFIX)):
                sources[src.relative_to(layer)] = src
    dest = Path(dest)
    files = {}
    for rel, src in sources.items():
        out = dest / render(str(rel), values, str(src)).removesuffix(SUFFIX)
        files[out] = render(src.read_text(), values, str(src))
    return files


def new(
    name: str, template: str, *, backend: str = "pallas", dest: Path | str = ".", namespace: str = "mylib"
) -> list[Path]:
    """Render `template` as kernel `name` into `dest`; refuses to overwrite any file."""
    files = plan(name, template, backend=backend, dest=dest, namespace=namespace)
    existing = [str(p) for p in files if p.exists()]
    if existing:
        raise ScaffoldError(
            f"tpu-kernels new: refusing to overwrite {', '.join(existing)}; choose another NAME or --dir."
        )
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return list(files)
