"""DTensor sharding rules of kernel ops: what a rule says, how it is registered with DTensor,
read off a Pallas kernel, and checked by simulating it in one process.

- `rules.py`: the `sharding=` option (`pointwise`, `rowwise`, a function, `"derived"`),
  registered for each op and derived for its backward op (docs/distributed.md);
- `registry.py`: what DTensor was told per op (`strategies_of`, `rule_of`), the messages' words;
- `derive.py`: strategies read off a Pallas kernel (`sharding="derived"`);
- `simulate.py`: every strategy of a rule on 2 and 3 shards in one process, against the
  unsharded call (`tpu_kernels.testing.assert_sharding_rule`, `tpu-kernels check --sharding`).

The layers: `registry` <- `simulate`, `derive` <- `rules`; nothing here imports `op.py`.
"""

from tpu_kernels.sharding.registry import check_strategies, rule_of, simulating, strategies_of
from tpu_kernels.sharding.rules import (
    Broadcast,
    Derived,
    backward_wrt,
    describe,
    normalize,
    pointwise,
    register,
    rowwise,
)

__all__ = [
    "Broadcast",
    "Derived",
    "backward_wrt",
    "check_strategies",
    "describe",
    "normalize",
    "pointwise",
    "register",
    "rowwise",
    "rule_of",
    "simulating",
    "strategies_of",
]
