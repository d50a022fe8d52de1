"""What every mutant is (`Mutation`), and the paths, test files and pytest filters the
catalogue's modules share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Mutation:
    id: str
    file: str  # relative to the repository root
    old: str  # found exactly once in the file
    new: str
    why: str  # the bug, in words
    tests: tuple[str, ...] = ()  # pytest arguments (files, node ids)
    test_filter: str | None = None  # pytest -k
    check: tuple[str, ...] | None = None  # `tpu-kernels check` arguments (modules, --filter)
    races: bool = False  # also `check --races`


K = "tpu_kernels/kernels/"
SOFTMAX, RMSNORM, ELEMENTWISE, MATMUL, BLOCKS = (
    K + "softmax/pallas.py",
    K + "rmsnorm/pallas.py",
    K + "scale_add/pallas.py",
    K + "matmul/pallas.py",
    K + "_blocks.py",
)
MATMUL_BLOCKS, T_MATMUL_BLOCKS = K + "matmul/blocks.py", ("tests/kernels/test_matmul_blocks.py",)
ATTENTION = K + "attention/pallas.py"
T_ATTENTION = (
    "tests/kernels/test_attention.py",
    "tests/kernels/test_attention_grids.py",
    "tests/kernels/test_attention_fused.py",
    "tests/kernels/test_attention_diagonal.py",
)
LINEAR_CE = K + "linear_cross_entropy/pallas.py"
T_LINEAR_CE = ("tests/kernels/test_linear_cross_entropy.py", "tests/kernels/test_linear_cross_entropy_space.py")
T_SOFTMAX, T_RMSNORM, T_ELEMENTWISE, T_MATMUL = (
    ("tests/kernels/test_softmax.py",),
    ("tests/kernels/test_rmsnorm.py",),
    ("tests/kernels/test_scale_add.py",),
    ("tests/kernels/test_matmul.py",),
)
# issue 59: every 128-lane width's chunk; the row kernels' VMEM models against the check's and the chip's
T_CHUNKS, T_VMEM_MODELS = ("tests/kernels/test_softmax_chunks.py",), ("tests/kernels/test_vmem_models.py",)


# opcheck and torch.compile parity (the slowest tests, about a third of each file's time here)
# test the op's registration, not the kernel's arithmetic, and the Helion twins' tests
# (tests/kernels/base.py) never run the mutated Pallas file: left out of the campaign. Running
# fewer tests can only lose catches, so the score is a lower bound for the full files.
FAST = "not opcheck and not compile_fullgraph and not helion_twin"


def _check(family: str) -> tuple[str, ...]:
    return ("tpu_kernels.kernels", "--filter", f"^tpu_kernels::{family}")


def family_mutants(file: str, tests: tuple[str, ...], ops: str) -> Callable[..., Mutation]:
    """The constructor of one family's mutants: `make(id, old, new, why, **fields)` edits `file`,
    runs `tests` (their fast ones, `FAST`) and `tpu-kernels check` on the ops matching `ops`."""

    def make(id: str, old: str, new: str, why: str, **kw: Any) -> Mutation:
        return Mutation(id, file, old, new, why, tests, test_filter=FAST, check=_check(ops), **kw)

    return make


# ---- the toolkit around the kernels (python -m tpu_kernels.mutate --toolkit) ----------------
# Each group names the test files that own the module, minus their slowest tests where others
# in the file catch every mutant of the group (the process-spawning and Inductor tests).
T_PROGRAM = ("tests/cache/test_program.py",)
T_BUILD = ("tests/cache/test_build.py",)
BUILD_FAST = "not two_processes_write_at_once and not run_time_state_reaches_every_later_process"
T_EAGER = (
    "tests/test_eager.py",
    "tests/test_eager_properties.py",
    "tests/test_eager_checks.py",
    "tests/tokamax/test_wrap.py",
)
T_FAKE = ("tests/test_fake.py",)
T_BUCKETS = ("tests/test_buckets.py",)
BUCKETS_FAST = "not inductor"
T_CORRECTNESS = ("tests/bench/test_correctness.py",)
CORRECTNESS_FAST = "not catalogues_wrong_kernels"
T_TITAN = ("tests/integrations/test_torchtitan.py",)
TITAN_FAST = "not five_steps"  # the training runs (one process, compile, 2 processes)
T_HF = ("tests/integrations/test_transformers.py",)
HF_FAST = "not inductor"
MEMORY = "tpu_kernels/runtime/cache/memory.py"
T_LOCK = (
    "tests/cache/test_lock.py",
    "tests/test_op.py::test_cache_builds_each_key_once_under_concurrent_calls",
)
T_PARALLEL = ("tests/tuning/test_parallel.py",)
PROGRAM, BUILD, STORE = (
    "tpu_kernels/runtime/cache/program.py",
    "tpu_kernels/runtime/cache/build.py",
    "tpu_kernels/runtime/cache/store.py",
)
EAGER, FAKE, BUCKETS = (
    "tpu_kernels/dispatch/eager.py",
    "tpu_kernels/dispatch/fake.py",
    "tpu_kernels/dispatch/buckets.py",
)
CORRECTNESS = "tpu_kernels/bench/correctness.py"
COMPARE = "tpu_kernels/verification/compare.py"  # the distances: normwise (the correctness column's) and element-wise
T_COMPARE = ("tests/test_checked.py", "tests/test_sharding_sim.py", "tests/test_testing.py")
TITAN = "tpu_kernels/integrations/torchtitan/modules.py"
HF_ATTENTION = "tpu_kernels/integrations/transformers/attention.py"
# the tuner and its tables (issue 46)
TUNER, TUNING = "tpu_kernels/autotuner/", "tpu_kernels/tunables/"
SELECT, POINT, PREDICT = TUNER + "select.py", TUNER + "point.py", TUNER + "predict.py"
BODY = TUNER + "body.py"
LOOKUP, TABLE, CHIP_NAME = TUNING + "lookup.py", TUNING + "table.py", TUNING + "chip_name.py"
T_SELECT, T_CHIP_NAME = ("tests/tuning/test_select.py",), ("tests/tuning/test_chip_name.py",)
T_LOOKUP = ("tests/tuning/test_lookup.py",)
T_TUNER = ("tests/tuning/test_tuner.py", "tests/tuning/test_predict.py")
TUNER_FAST = "not helion and not shipped_kernel and not tokamax"  # the end-to-end runs of other tuners
T_TABLE = ("tests/tuning/test_table.py", *T_LOOKUP)
T_VMEM = (
    "tests/lowering_check/test_vmem_limits.py",
    "tests/lowering_check/test_semantics_and_limits.py::test_scoped_limits_per_generation",
)


T_VMEM_MODEL = ("tests/lowering_check/test_vmem_model.py", "tests/lowering_check/test_chip_corpus.py")


# issue 59: the chip runner (tpu_kernels/chip), its corpus, its fit, the three-pass dot's hook
CHIP_MEASURE, CHIP_RUN, CHIP_LAYER, CHIP_REPORT, CORPUS = (
    "tpu_kernels/chip/measure.py",
    "tpu_kernels/chip/run.py",
    "tpu_kernels/chip/layer.py",
    "tpu_kernels/chip/report.py",
    "tpu_kernels/chip/corpus.py",
)
CHIP_TUNING, MOSAIC = "bench/chip_tuning.py", "tpu_kernels/runtime/mosaic_precision.py"
T_CHIP_FIGURES = ("tests/test_chip_figures.py", "tests/test_chip.py")
T_CORPUS = ("tests/lowering_check/test_chip_corpus.py",)
T_CHIP_FIT = ("tests/tuning/test_chip_fit.py",)
T_MOSAIC = ("tests/test_mosaic_precision.py",)


def _toolkit(
    id: str, file: str, old: str, new: str, why: str, tests: tuple[str, ...], filter: str | None = None
):
    return Mutation(id, file, old, new, why, tests, test_filter=filter, check=None)
