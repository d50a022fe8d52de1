"""What a kernel op is, read from its source before anything runs: the bottom of the core.

- `signature.py`: a kernel's Python signature -> a torch operator schema;
- `options.py`: the options of a kernel op, written once for `tpu_kernel`, `KernelOp` and `tokamax_op`;
- `protocol.py`: the `Op` protocol, what every feature sees of an op (features never import op.py);
- `dtypes.py`: torch <-> JAX dtypes, and which need JAX's 64-bit mode.

Imports nothing else of the core (tests/test_layers.py).
"""
