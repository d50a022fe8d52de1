"""The version in one place: pyproject.toml's and the leaf module's (`tpu_kernels/_version.py`,
which the compile cache's key and the tuning tables read without importing the package) agree."""

import tomllib
from pathlib import Path

import tpu_kernels
from tpu_kernels import _version

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_and_the_leaf_module_say_one_version():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert _version.__version__ == declared == tpu_kernels.__version__
