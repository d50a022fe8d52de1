"""Tests that run only on a CUDA GPU with JAX's CUDA backend (`scripts/gpu-check` runs them).

Every module here marks its tests `cuda` and skips them, saying why, where torch sees no CUDA
device or JAX has no CUDA backend (CI, the development machines). Under `scripts/gpu-check`
(`TPU_KERNELS_REQUIRE_CUDA=1`) the same condition is an error instead: a GPU check whose
tests all skipped would pass without checking anything.
"""

from __future__ import annotations

import os

import pytest

REQUIRE_ENV = "TPU_KERNELS_REQUIRE_CUDA"


def marks() -> list[pytest.MarkDecorator]:
    """A CUDA test module's `pytestmark`: the `cuda` marker, and the skip (or, under
    scripts/gpu-check, the collection error) where CUDA is unavailable."""
    from tpu_kernels.runtime.devices.cuda import unavailable_reason

    why = unavailable_reason()
    if why is not None and os.environ.get(REQUIRE_ENV) == "1":
        raise RuntimeError(f"{REQUIRE_ENV}=1 but {why}")
    return [pytest.mark.cuda, pytest.mark.skipif(why is not None, reason=why or "")]
