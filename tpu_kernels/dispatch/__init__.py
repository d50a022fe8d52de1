"""How one call of an op runs under each of torch's modes: what op.py assembles per op.

- `eager.py`: the eager shortcut (plain CPU calls skip torch's dispatcher);
- `fake.py` and `symbolic.py`: fake (meta) functions and symbolic sizes for torch.compile;
- `autograd.py`: the backward (explicit, derived with jax.vjp, or absent);
- `vmap.py`: `torch.vmap` batching rules; `autocast.py`: autocast policies;
- `buckets.py`: bounded dynamism (pad a varying dimension to a bucket, slice back).

Reads `definition/`, `runtime/` and `verification/`, never op.py (tests/test_layers.py).
"""
