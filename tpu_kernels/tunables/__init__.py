"""Tuned statics, the core's part: what an op declares tunable (`declare.py`), the tables that
hold tuned configs per chip, dtypes and shape bucket (`table.py`), the chip a call runs on
(`chip_name.py`) and the lookup a call makes before dispatch (`lookup.py`).

Finding the configs (running candidates, checking them against the reference, timing them,
predicting TPU rankings) is `tpu_kernels.autotuner`, a layer above the core; docs/autotuning.md
tells the whole story.
"""

from tpu_kernels.tunables.chip_name import chip_of
from tpu_kernels.tunables.declare import Tunables, bucket, declare, default_key
from tpu_kernels.tunables.lookup import (
    AUTOTUNE_ENV,
    TUNING_DIR_ENV,
    NoRightConfigError,
    Tuned,
    TuningNote,
    reload,
    table_paths,
    write_path,
)
from tpu_kernels.tunables.provenance import PRINT_ENV, TunedConfig
from tpu_kernels.tunables.table import Entry, Table, TuningTableError, read

__all__ = [
    "AUTOTUNE_ENV",
    "TUNING_DIR_ENV",
    "Entry",
    "NoRightConfigError",
    "PRINT_ENV",
    "Table",
    "Tunables",
    "Tuned",
    "TunedConfig",
    "TuningNote",
    "TuningTableError",
    "bucket",
    "chip_of",
    "declare",
    "default_key",
    "read",
    "reload",
    "table_paths",
    "write_path",
]
