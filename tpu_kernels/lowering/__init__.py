"""Lowering for a TPU on a machine without one, and what a traced kernel says about itself.

- `target.py`: TPU generations: which one the lowering targets, and its VMEM;
- `export.py`: `jax.export(..., platforms=["tpu"])` of a kernel op;
- `jaxprs.py`: the Pallas kernels (`pallas_call` equations) inside a traced JAX function;
- `pallas_grid.py`: what one `pallas_call` says about its grid, read without running it.

Reads `definition/` only (tests/test_layers.py); the check (`tpu_kernels/lowering_check/`) builds on it.
"""
