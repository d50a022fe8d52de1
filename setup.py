"""Build hook: ship templates/ and the benchmark suites bench/ inside the package, as
tpu_kernels/_templates and tpu_kernels/_suites.

`tpu-kernels new` and `tpu-kernels bench` read them from the checkout's folders (so an
editable install sees edits at once); a wheel has no checkout, so they are copied into
the built package. Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithTemplates(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        root = Path(__file__).resolve().parent
        for folder, copy in (("templates", "_templates"), ("bench", "_suites")):
            if (root / folder).is_dir():
                target = Path(self.build_lib) / "tpu_kernels" / copy
                shutil.copytree(
                    root / folder, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
                )


setup(cmdclass={"build_py": BuildPyWithTemplates})
