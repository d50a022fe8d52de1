"""Template files: where they are and how their placeholders are filled (stdlib only).

`tpu-kernels new` (scaffold.py) renders whole templates to disk with these; the chip runner
(tpu_kernels.chip.load) renders a Pallas template's kernel in memory on a TPU host without
torch, so this module imports nothing heavier than the standard library.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tpu_kernels.errors import TpuKernelsError

ENV = "TPU_KERNELS_TEMPLATES"
PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")


class ScaffoldError(TpuKernelsError, ValueError):
    """A template cannot be rendered as asked (bad name, unknown template, existing files)."""


def templates_dir() -> Path:
    """Where the templates are: $TPU_KERNELS_TEMPLATES, the checkout's `templates/`, or the
    copy installed inside the package."""
    package = Path(__file__).resolve().parent  # tpu_kernels/
    candidates = [Path(os.environ[ENV])] if os.environ.get(ENV) else []
    candidates += [package.parent / "templates", package / "_templates"]
    for c in candidates:
        if c.is_dir():
            return c
    raise ScaffoldError(
        f"tpu-kernels new: no templates folder found (looked in {', '.join(map(str, candidates))}); "
        f"set {ENV} to the templates/ folder of a tpu_kernels checkout."
    )


def render(text: str, values: dict[str, str], where: str = "template") -> str:
    def sub(m: re.Match) -> str:
        if m[1] not in values:
            raise ScaffoldError(f"{where}: unknown placeholder {{{{{m[1]}}}}}; known: {sorted(values)}")
        return values[m[1]]

    return PLACEHOLDER.sub(sub, text)


__all__ = ["ENV", "PLACEHOLDER", "ScaffoldError", "render", "templates_dir"]
