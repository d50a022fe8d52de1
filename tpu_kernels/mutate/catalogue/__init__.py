"""The mutation catalogue: small, realistic bugs, each one textual edit, one module per family
(`SHIPPED`) and per layer of the toolkit around the kernels (`TOOLKIT`).

Every mutant names the tests that should catch it (the kernel's own test file) and the ops
`tpu-kernels check` lowers for it (checked for the smallest default scoped VMEM limit among
the chips the check targets, v5e's 16 MiB). Kinds follow issue #16's list: arithmetic or
accumulation in the input's low precision, softmax without max-subtraction, a residual in
the input's dtype, an oversized default block, a parallel accumulation axis, the shared
row-block helper's rounding, a dropped eps, a dot without preferred_element_type, off-by-one
index maps and grids, wrong scales and signs, dropped semantics; (issue #23) a result that
takes one input's dtype where torch promotes; and (issue 59) the VMEM models' and block
searches' edges: a chunk search that misses 128-lane chunks, a backward's float32 temporaries
under-counted, a (rows, 1) column counted without its lane padding, a default matmul block
halved below the MXU.

`TOOLKIT` holds mutants of the machinery around the kernels (the on-disk cache's key and
reads, the eager shortcut, derived fakes, buckets, the benchmark's correctness verdict, the
torchtitan and Hugging Face integrations, the tuner and its tables, the chip names, the VMEM
check's buffers and limits): issue #39's ten survivors and the fresh edits of the run that
followed it, issue #46's survivors and faults, and issue 59's (the chip runner's error and speed
figures, its corpus and fit, the three-pass dot's tracing hook, the layer's gradient comparison).
They name tests only: `tpu-kernels check` judges kernels, not these.

Modules: `base` (`Mutation`, the paths, test files and filters they share); the families'
`softmax`, `rmsnorm`, `scale_add`, `matmul` (its kernel and its block model), `attention`,
`linear_cross_entropy` and `row_blocks`
(the row kernels' shared helper, `kernels/_blocks.py`); the toolkit's layers `dispatch`,
`runtime`, `tuning`, `chip`, `check`, `verdicts` (the benchmark's correctness column and the
distances) and `integrations`. A mutant lives where the file it edits lives.
"""

from __future__ import annotations

from tpu_kernels.mutate.catalogue import (
    attention,
    check,
    chip,
    dispatch,
    integrations,
    linear_cross_entropy,
    matmul,
    rmsnorm,
    row_blocks,
    runtime,
    scale_add,
    softmax,
    tuning,
    verdicts,
)
from tpu_kernels.mutate.catalogue.base import FAST, Mutation

SHIPPED: tuple[Mutation, ...] = (
    softmax.MUTANTS
    + rmsnorm.MUTANTS
    + scale_add.MUTANTS
    + matmul.MUTANTS
    + attention.MUTANTS
    + linear_cross_entropy.MUTANTS
    + row_blocks.MUTANTS
)
"""The shipped kernels' mutants: each family's module, then the row kernels' shared helper."""

TOOLKIT: tuple[Mutation, ...] = (
    dispatch.MUTANTS
    + runtime.MUTANTS
    + tuning.MUTANTS
    + chip.MUTANTS
    + check.MUTANTS
    + verdicts.MUTANTS
    + integrations.MUTANTS
)
"""The toolkit's mutants, layer by layer."""

__all__ = ["FAST", "SHIPPED", "TOOLKIT", "Mutation"]
