"""Run the shipped kernels and the Pallas templates on an attached TPU, with JAX alone.

`python -m tpu_kernels.chip` (docs/devices.md, "On a TPU machine without torch") imports each
kernel's JAX half without torch (`load.py`), runs every point of a grid of model shapes
(`grid.py`, collecting each family's points from its `chip.py`; a point is `point.Point`) on the chip: compile verdict, error against a float64 host reference, time
against XLA's version of the same math (`measure.py`), and writes a JSON record under
bench/reports/ that docs/performance.md's "On a TPU v5e" table is generated from.
"""
