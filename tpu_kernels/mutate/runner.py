"""Apply one mutant in a scratch copy of the repository and run the tests and the check on it.

Each run ends in one of three verdicts:

- caught: a test failed (pytest reports a failure, not an error) or the check reported a
  problem (exit status 1);
- survived: the tests passed and the check passed;
- undetermined: the run said nothing about the mutant: a timeout, a collection error (the
  mutated module does not import), an error in a test's setup, a crash, no tests collected,
  an import error of the harness, a check that found no ops. These are left out of the score.

Time limits come from a baseline: the same tests and the same check run on the unmutated copy
first (which must pass: a failing baseline would make every mutant look caught), and each
mutant's run may take `Limits.factor` times as long plus `Limits.margin_s`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tpu_kernels.mutate.catalogue import Mutation

CAUGHT, SURVIVED, UNDETERMINED = "caught", "survived", "undetermined"

# Limits when no baseline was measured (run_mutant called on its own), and the baselines' own:
# generous, since a baseline runs every test where a caught mutant stops at its first failure.
TEST_TIMEOUT_S = 600
CHECK_TIMEOUT_S = 300
BASELINE_TIMEOUT_S = 1800
# Tests run first (`_pytest_order`): the sharp, quick ones of the shipped kernels' and the
# templates' tests, by name. Only the order changes, never the set.
FIRST = (
    r"low_precision|large_logits|magnitudes|residual|cancellation|eps|grid|block_rows|mixed_dtypes"
    r"|vmem|blocks_both_ways|lowers|gradcheck"
)
# Exceptions that say the test harness itself is broken, not that the kernel is wrong.
HARNESS_ERRORS = ("ModuleNotFoundError", "ImportError")
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


@dataclass(frozen=True)
class Step:
    """One run of the tests or the check: its verdict, the line that says why, its duration."""

    verdict: str  # CAUGHT, SURVIVED or UNDETERMINED
    detail: str = ""
    seconds: float = 0.0


@dataclass
class Outcome:
    mutation: Mutation
    caught_by: str | None  # "tests" or "check" when caught, else None
    seconds: float
    detail: str = ""  # the first failing test or check line, or why it is undetermined
    verdict: str = ""  # CAUGHT, SURVIVED or UNDETERMINED (derived from caught_by if not given)

    def __post_init__(self) -> None:
        if not self.verdict:
            self.verdict = CAUGHT if self.caught_by else SURVIVED

    @property
    def caught(self) -> bool:
        return self.verdict == CAUGHT

    @property
    def undetermined(self) -> bool:
        return self.verdict == UNDETERMINED

    @property
    def survived(self) -> bool:
        return self.verdict == SURVIVED


@dataclass(frozen=True)
class Limits:
    """A mutant's run may take `factor` x the unmutated run's time plus `margin_s` seconds:
    a hang ends, and a slow machine does not turn a passing run into a timeout."""

    factor: float = 3.0
    margin_s: float = 60.0

    def seconds(self, baseline_s: float) -> float:
        return self.factor * baseline_s + self.margin_s


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


def _run(cmd: list[str], copy: Path, timeout: float) -> tuple[int | None, str, float]:
    """(exit status or None on a timeout, output, seconds). The command runs in its own
    process group, so a timeout also ends whatever it started (worker processes)."""
    start = time.perf_counter()
    p = subprocess.Popen(
        cmd,
        cwd=copy,
        env=_env(copy),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended just now
            pass
        out, _ = p.communicate()
        return None, out or "", time.perf_counter() - start
    return p.returncode, out or "", time.perf_counter() - start


# ---- what a run's result means ----


@dataclass(frozen=True)
class Reported:
    """One test pytest reported as not passed (from its JUnit XML report)."""

    test: str
    kind: str  # "failure" or "error"
    message: str


def junit_problems(xml_text: str) -> list[Reported]:
    """The failures and errors of a pytest JUnit XML report, in order."""
    problems = []
    for case in ET.fromstring(xml_text).iter("testcase"):
        test = "::".join(p for p in (case.get("classname", ""), case.get("name", "")) if p)
        for child in case:
            if child.tag in ("failure", "error"):
                problems.append(Reported(test, child.tag, (child.get("message") or "").strip()))
    return problems


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def classify_tests(rc: int | None, report: list[Reported] | None, output: str, limit_s: float) -> Step:
    """What one pytest run says about a mutant. `rc` None: it timed out; `report`: its JUnit
    failures and errors (None when pytest wrote no report)."""
    if rc is None:
        return Step(UNDETERMINED, f"tests timed out after {limit_s:.0f} s")
    if rc == 0:
        return Step(SURVIVED)
    if rc == 5:
        return Step(UNDETERMINED, "no tests collected")
    if rc < 0:
        return Step(UNDETERMINED, f"tests crashed ({_signal_name(rc)}): {_first_failure(output)}")
    if rc == 2:  # interrupted: a collection error, typically the mutated module does not import
        return Step(UNDETERMINED, f"tests not run (collection error): {_first_failure(output)}")
    if rc != 1:  # 3: pytest's internal error, 4: usage error, others: the interpreter died
        return Step(UNDETERMINED, f"pytest exited with status {rc}: {_first_failure(output)}")
    if report is None:
        return Step(UNDETERMINED, f"pytest wrote no report: {_first_failure(output)}")
    failures = [r for r in report if r.kind == "failure"]
    if not failures:
        first = report[0] if report else None
        what = f"{first.test}: {first.message}" if first else _first_failure(output)
        return Step(UNDETERMINED, f"an error, not a test failure: {what}"[:300])
    first = failures[0]
    if first.message.startswith(HARNESS_ERRORS):
        return Step(UNDETERMINED, f"the test harness failed to import: {first.test}: {first.message}"[:300])
    return Step(CAUGHT, f"FAILED {first.test} - {first.message}"[:300])


def classify_check(rc: int | None, output: str, limit_s: float) -> Step:
    """What one `tpu-kernels check` run says: exit 1 is a problem found, 0 none; anything
    else (2: nothing found or the module does not import, a crash, a timeout) says nothing."""
    if rc is None:
        return Step(UNDETERMINED, f"check timed out after {limit_s:.0f} s")
    if rc == 0:
        return Step(SURVIVED)
    if rc == 1:
        return Step(CAUGHT, _first_failure(output))
    if rc < 0:
        return Step(UNDETERMINED, f"check crashed ({_signal_name(rc)}): {_first_failure(output)}")
    return Step(UNDETERMINED, f"check exited with status {rc}: {_first_failure(output)}")


# ---- running ----


def tests_key(mutation: Mutation) -> tuple:
    return (mutation.tests, mutation.test_filter)


def check_key(mutation: Mutation) -> tuple:
    return (mutation.check, mutation.races)


def run_tests(mutation: Mutation, copy: Path, timeout: float = TEST_TIMEOUT_S) -> Step:
    if not mutation.tests:
        return Step(SURVIVED)
    with tempfile.TemporaryDirectory(prefix="tpu-kernels-mutate-report-") as tmp:
        junit = Path(tmp) / "report.xml"
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-n", "0"]
        cmd += ["-p", "tpu_kernels.mutate._pytest_order", f"--junitxml={junit}", *mutation.tests]
        if mutation.test_filter:
            cmd += ["-k", mutation.test_filter]
        rc, out, seconds = _run(cmd, copy, timeout)
        try:
            report = junit_problems(junit.read_text()) if junit.exists() else None
        except ET.ParseError:
            report = None
    step = classify_tests(rc, report, out, timeout)
    return Step(step.verdict, step.detail, seconds)


def run_check(mutation: Mutation, copy: Path, chip: str, timeout: float = CHECK_TIMEOUT_S) -> Step:
    if mutation.check is None:
        return Step(SURVIVED)
    cmd = [sys.executable, "-m", "tpu_kernels.cli", "check", *mutation.check, "--chip", chip]
    if mutation.races:
        cmd.append("--races")
    rc, out, seconds = _run(cmd, copy, timeout)
    step = classify_check(rc, out, timeout)
    return Step(step.verdict, step.detail, seconds)


def combine(mutation: Mutation, check: Step, tests: Step | None, seconds: float) -> Outcome:
    """One mutant's verdict from its check and its tests (None: not run, the check caught it):
    caught if either caught it; else undetermined if either said nothing; else survived."""
    if check.verdict == CAUGHT:
        return Outcome(mutation, "check", seconds, check.detail)
    assert tests is not None  # the tests run whenever the check did not catch the mutant
    if tests.verdict == CAUGHT:
        return Outcome(mutation, "tests", seconds, tests.detail)
    unknown = [s for s in (check, tests) if s.verdict == UNDETERMINED]
    if unknown:
        return Outcome(mutation, None, seconds, "; ".join(s.detail for s in unknown), UNDETERMINED)
    return Outcome(mutation, None, seconds)


def run_mutant(
    mutation: Mutation,
    copy: Path,
    *,
    chip: str = "v5e",
    test_timeout_s: float = TEST_TIMEOUT_S,
    check_timeout_s: float = CHECK_TIMEOUT_S,
) -> Outcome:
    """One mutant in the scratch copy `copy`, which is restored afterwards. The check runs
    first (seconds), the tests only when it does not catch the mutant."""
    start = time.perf_counter()
    original = apply(mutation, copy)
    try:
        check = run_check(mutation, copy, chip, check_timeout_s)
        tests = None if check.verdict == CAUGHT else run_tests(mutation, copy, test_timeout_s)
    finally:
        (copy / mutation.file).write_text(original)
    return combine(mutation, check, tests, time.perf_counter() - start)


@dataclass(frozen=True)
class Baseline:
    """The unmutated run of one mutant group's tests or check."""

    what: str  # "tests" or "check"
    key: tuple
    step: Step  # SURVIVED: it passed, as it must

    @property
    def passed(self) -> bool:
        return self.step.verdict == SURVIVED

    def describe(self) -> str:
        args = self.key[0] or ()
        extra = f" -k {self.key[1]!r}" if self.what == "tests" and self.key[1] else ""
        extra += " --races" if self.what == "check" and self.key[1] else ""
        return f"{self.what} {' '.join(args)}{extra}"


def run_mutants(
    mutations: Iterable[Mutation],
    root: Path,
    *,
    chip: str = "v5e",
    echo: Callable[[Outcome], None] | None = None,
    limits: Limits = Limits(),
    echo_baseline: Callable[[Baseline], None] | None = None,
) -> list[Outcome]:
    """Every mutant in one scratch copy of `root`. Each distinct set of tests and each distinct
    check runs unmutated first; a mutant's run may take `limits.seconds(baseline)`. The mutants
    of a group whose baseline fails (or times out) are undetermined, and not run."""
    mutations = list(mutations)
    outcomes = []
    baselines: dict[tuple, Baseline] = {}
    with scratch_copy(root) as copy:

        def baseline(what: str, key: tuple, m: Mutation) -> Baseline:
            if (what, key) not in baselines:
                if what == "tests":
                    step = run_tests(m, copy, BASELINE_TIMEOUT_S)
                else:
                    step = run_check(m, copy, chip, BASELINE_TIMEOUT_S)
                baselines[what, key] = Baseline(what, key, step)
                if echo_baseline:
                    echo_baseline(baselines[what, key])
            return baselines[what, key]

        for m in mutations:
            check_base = baseline("check", check_key(m), m)
            tests_base = baseline("tests", tests_key(m), m)
            failing = [b for b in (check_base, tests_base) if not b.passed]
            if failing:
                detail = "; ".join(
                    f"without the mutant the {b.what} did not pass ({b.step.detail})" for b in failing
                )
                outcome = Outcome(m, None, 0.0, detail[:300], UNDETERMINED)
            else:
                outcome = run_mutant(
                    m,
                    copy,
                    chip=chip,
                    test_timeout_s=limits.seconds(tests_base.step.seconds),
                    check_timeout_s=limits.seconds(check_base.step.seconds),
                )
            outcomes.append(outcome)
            if echo:
                echo(outcome)
    return outcomes
