"""Where a kernel runs and how its tensors get there: the bridge, the devices, the cache.

- `bridge.py`: torch <-> JAX arrays without copies (DLPack);
- `devices/`: one executor per device kind (CPU interpreter, CUDA, TPU through torch_tpu);
- `sources/`: a kernel's source (a JAX/Pallas function or a Helion kernel) as something to trace;
- `cache/`: the disk cache of compiled executables, keyed by the traced program;
- `interpret.py`: which Pallas interpreter runs kernels on a CPU;
- `precision.py`: the float32 matmul precision a kernel is traced with;
- `mosaic_precision.py`: tracing at it with Pallas kernel bodies at a precision Mosaic compiles;
- `prebuild.py`: building a call's kernel without running it (the tuner compiles candidates ahead);
- `forks.py`: a process forked after JAX started, refused with a clear error instead of hanging.

Reads `definition/` and `lowering/` (tests/test_layers.py).
"""
