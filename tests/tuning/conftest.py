"""Every tuning test gets a tuning directory of its own and starts with no table read."""

import pytest

from tpu_kernels import tunables


@pytest.fixture(autouse=True)
def tuning_dir(tmp_path, monkeypatch):
    d = tmp_path / "tuning"
    d.mkdir()
    monkeypatch.setenv("TPU_KERNELS_TUNING_DIR", str(d))
    monkeypatch.delenv("TPU_KERNELS_AUTOTUNE", raising=False)
    tunables.reload()
    yield d
    tunables.reload()
