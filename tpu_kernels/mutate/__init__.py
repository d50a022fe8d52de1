"""Mutation testing of kernels: do the tests and `tpu-kernels check` catch small, realistic bugs?

Each mutant is one textual edit of a kernel file (`Mutation`: the exact text to find once and
its replacement). The runner copies the repository to a scratch folder (never touching the
working tree), applies one mutant there, runs the given tests (`pytest -x`, PYTHONPATH pointing
at the scratch copy) and `tpu-kernels check` (`--races` where asked); the mutant is caught
when a test fails or the check reports a problem, and undetermined when a run says nothing (a
timeout, a collection error, a crash: `runner.py`). The score is caught / (caught + survived);
the survivors are the gaps. Time limits scale with a baseline run of the unmutated copy.

    python -m tpu_kernels.mutate                          # the shipped kernels' catalogue
    python -m tpu_kernels.mutate --templates              # the templates' catalogue (templates.py)
    python -m tpu_kernels.mutate --toolkit                # the cache's, fakes', buckets', ... (catalogue/)
    python -m tpu_kernels.mutate my_pkg/kernel.py --tests tests/test_kernel.py   # your kernel

For a file of your own, mutants come from generic operators (`operators.py`): arithmetic in
the input's dtype instead of float32, a dropped `preferred_element_type`, an accumulation
axis marked "parallel", a floor instead of `pl.cdiv` grid, an off-by-one index map, a dropped
`eps`, a tenfold default block size, ... See docs/mutation-testing.md.
"""

from tpu_kernels.mutate.catalogue import SHIPPED, TOOLKIT, Mutation
from tpu_kernels.mutate.operators import generate
from tpu_kernels.mutate.runner import Outcome, run_mutant, run_mutants
from tpu_kernels.mutate.templates import TEMPLATES

__all__ = ["SHIPPED", "TEMPLATES", "TOOLKIT", "Mutation", "Outcome", "generate", "run_mutant", "run_mutants"]
