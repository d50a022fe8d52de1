"""Tokamax's ops as torch ops: torch.ops.tokamax.<name>, with gradients, fakes and compile support.

Each function here takes torch tensors in Tokamax's layouts, chooses a Tokamax
implementation by the tensors' device unless `implementation=` says otherwise
(`resolve_implementation`), and calls the registered op. docs/tokamax.md lists
every op with its signature, layouts, devices and implementations.

    from tpu_kernels import tokamax as tk
    out = tk.dot_product_attention(q, k, v, is_causal=True)   # q: [batch, seq, heads, head_dim]

One folder per op family (`attention/`, `normalization/`, ...; named after
Tokamax's `_src/ops/<family>/`), each with its ops, reference, TPU examples and
shapes; this package imports every family folder, which registers it in `FAMILIES`
(see `registry.py`), so a new folder needs no line here.
"""

import importlib.util as _importlib_util

if _importlib_util.find_spec("tokamax") is None:  # the rest of tpu_kernels works without it
    raise ModuleNotFoundError(
        "tpu_kernels.tokamax needs the tokamax package (tokamax>=0.0.17, which needs Python >= 3.12 "
        "and JAX >= 0.11.1): pip install 'tokamax>=0.0.17'",
        name="tokamax",
    )

from tpu_kernels import wiring as _wiring
from tpu_kernels.tokamax.implementation import (
    ImplementationError,
    implementations,
    resolve_implementation,
)
from tpu_kernels.tokamax.registry import FAMILIES, Family
from tpu_kernels.tokamax.wrap import tokamax_op

# Importing a family folder (a subpackage with an `op.py`; `models/` is not one) registers
# its ops and implementation tables: FAMILIES and implementation.OPS follow this,
# alphabetical, order. Each family's public functions are exported here under their names.
_wiring.discover(__name__, __path__, marker="op.py")
_FUNCTIONS = {fn.__name__: fn for family in FAMILIES.values() for fn in family.functions}
globals().update(_FUNCTIONS)

__all__ = [
    "FAMILIES",
    "Family",
    "ImplementationError",
    "implementations",
    "resolve_implementation",
    "tokamax_op",
]
__all__ += sorted(_FUNCTIONS)
