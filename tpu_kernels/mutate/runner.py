"""Apply one mutant in a scratch copy of the repository and run the tests and the check on it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tpu_kernels.mutate.catalogue import Mutation

TEST_TIMEOUT_S = 600  # one mutant's tests: a mutant that hangs (a grid that never ends) is caught
CHECK_TIMEOUT_S = 300
# Tests run first (`_pytest_order`): the sharp, quick ones of the shipped kernels' and the
# templates' tests, by name. Only the order changes, never the set.
FIRST = r"low_precision|large_logits|magnitudes|residual|cancellation|eps|grid|block_rows|lowers|gradcheck"
_SKIP_DIRS = {
    ".git",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".venv",
    "venv",
    "build",
    "dist",
    ".eggs",
}


@dataclass
class Outcome:
    mutation: Mutation
    caught_by: str | None  # "tests", "check", "timeout", or None: it survived
    seconds: float
    detail: str = ""  # the first failing test or check line

    @property
    def caught(self) -> bool:
        return self.caught_by is not None


def repo_root(path: Path) -> Path:
    """The git work tree holding `path`, or its folder when it is in none."""
    path = path.resolve()
    start = path if path.is_dir() else path.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(start), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=True,
        )
        return Path(out.stdout.strip())
    except (subprocess.CalledProcessError, FileNotFoundError):
        return start


def _files(root: Path) -> Iterator[Path]:
    """The repository's files: git's tracked and untracked-not-ignored ones, or a plain walk."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"],
            capture_output=True,
            check=True,
        )
        for name in out.stdout.decode().split("\0"):
            if name and (root / name).is_file():
                yield Path(name)
        return
    except (subprocess.CalledProcessError, FileNotFoundError):
        pass
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        for f in filenames:
            yield Path(dirpath, f).relative_to(root)


@contextmanager
def scratch_copy(root: Path) -> Iterator[Path]:
    """A throw-away copy of the repository at `root` (the working tree is never edited)."""
    tmp = Path(tempfile.mkdtemp(prefix="tpu-kernels-mutate-"))
    try:
        for rel in _files(root):
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, dest)
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def apply(mutation: Mutation, copy: Path) -> str:
    """Edit the scratch copy; returns the original text so it can be put back."""
    path = copy / mutation.file
    text = path.read_text()
    count = text.count(mutation.old)
    if count != 1:
        raise ValueError(
            f"mutant {mutation.id}: {mutation.old!r} occurs {count} times in {mutation.file}, "
            "expected exactly once (the catalogue is stale: update the mutant's text)"
        )
    path.write_text(text.replace(mutation.old, mutation.new))
    return text


def _env(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(copy)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    env.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.setdefault("TPU_KERNELS_TEST_SEED", "0")  # the same inputs for every mutant
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("TPU_KERNELS_MUTATE_FIRST", FIRST)
    return env


def _first_failure(text: str) -> str:
    for line in text.splitlines():
        if line.startswith(("FAILED", "ERROR")) or "error (" in line:
            return line.strip()[:300]
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _run(cmd: list[str], copy: Path, timeout: int) -> tuple[int | None, str]:
    try:
        p = subprocess.run(cmd, cwd=copy, env=_env(copy), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "timed out"
    return p.returncode, p.stdout + p.stderr


def run_tests(mutation: Mutation, copy: Path) -> tuple[bool, str]:
    if not mutation.tests:
        return False, ""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-n", "0"]
    cmd += ["-p", "tpu_kernels.mutate._pytest_order", *mutation.tests]
    if mutation.test_filter:
        cmd += ["-k", mutation.test_filter]
    rc, out = _run(cmd, copy, TEST_TIMEOUT_S)
    if rc is None:
        return True, "tests timed out"
    if rc == 5:  # no tests collected: that catches nothing
        return False, "no tests collected"
    return rc != 0, _first_failure(out) if rc else ""


def run_check(mutation: Mutation, copy: Path, chip: str) -> tuple[bool, str]:
    if mutation.check is None:
        return False, ""
    cmd = [sys.executable, "-m", "tpu_kernels.cli", "check", *mutation.check, "--chip", chip]
    if mutation.races:
        cmd.append("--races")
    rc, out = _run(cmd, copy, CHECK_TIMEOUT_S)
    if rc is None:
        return True, "check timed out"
    return rc == 1, _first_failure(out) if rc == 1 else ""


def run_mutant(mutation: Mutation, copy: Path, *, chip: str = "v5e") -> Outcome:
    """One mutant in the scratch copy `copy`, which is restored afterwards. The check runs
    first (seconds), the tests only when it passes."""
    start = time.perf_counter()
    original = apply(mutation, copy)
    try:
        caught, detail = run_check(mutation, copy, chip)
        by = "check" if caught else None
        if not caught:
            caught, detail = run_tests(mutation, copy)
            by = "tests" if caught else None
    finally:
        (copy / mutation.file).write_text(original)
    return Outcome(mutation, by, time.perf_counter() - start, detail)


def run_mutants(mutations: Iterable[Mutation], root: Path, *, chip: str = "v5e", echo=None) -> list[Outcome]:
    outcomes = []
    with scratch_copy(root) as copy:
        for m in mutations:
            outcome = run_mutant(m, copy, chip=chip)
            outcomes.append(outcome)
            if echo:
                echo(outcome)
    return outcomes
