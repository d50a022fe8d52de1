"""Build hook: ship templates/ inside the package, as tpu_kernels/_templates.

`tpu-kernels new` reads the templates from the checkout's templates/ folder (so an
editable install sees edits at once); a wheel has no checkout, so the templates are
copied into the built package. Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithTemplates(build_py):
    def run(self):
        super().run()
        source = Path(__file__).resolve().parent / "templates"
        if source.is_dir() and not getattr(self, "editable_mode", False):
            target = Path(self.build_lib) / "tpu_kernels" / "_templates"
            shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))


setup(cmdclass={"build_py": BuildPyWithTemplates})
