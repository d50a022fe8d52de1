"""Whether a result is right: references, tolerances and the one comparator.

- `tolerance.py`: what a kernel's result is compared with, and how closely (one rule);
- `compare.py`: the one comparator (element-by-element and normwise) every consumer uses;
- `checked_mode.py`: every call also runs its float64 reference and raises on a mismatch;
- `bounds.py`: block indices outside their array in a real call (scalar-prefetch index maps).

Reads `definition/`, `lowering/` and `runtime/` (tests/test_layers.py).
"""
