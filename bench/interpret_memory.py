"""Peak memory of a Pallas kernel in the CPU interpreter, as a multiple of its output's size.

One fresh process per (route, size): it makes float32 inputs (rows x 1024), resets the
process's peak resident memory (writing 5 to /proc/self/clear_refs), and reads its rise
(VmHWM in /proc/self/status: XLA's buffers are not Python allocations, so tracemalloc
misses them and ru_maxrss cannot be reset). Routes:

  op              tpu_kernels.kernels.scale_add (Pallas, "fast" interpreter) through the bridge:
                  its first call (compile and run) and a second call
  pallas_jax      the same Pallas kernel as a jitted JAX function (no torch, no bridge),
                  compiled ahead from shapes alone, then run: the two rises apart
  pallas_softmax  the softmax Pallas kernel the same way (one input, one output)
  jax_op          an op whose body is plain JAX (x + alpha * y) through the same bridge
  xla             x + alpha * y in jitted JAX (no Pallas, no torch)

Measured here (docs/devices.md): a Pallas kernel's run in the interpreter rises by about
2x its inputs' bytes plus its output's (scale_add 5.0x the output, softmax 3.0x), plain
XLA by the output alone (1.0x). JAX's HLO interpreter (jax/_src/pallas/hlo_interpreter.py)
carries every input and output through a `while_loop` over the grid, so XLA copies the
inputs into the loop's buffers; the bridge adds nothing ("op" ~ "pallas_jax").

    python bench/interpret_memory.py [--mib 128,256] [--routes op,pallas_jax,pallas_softmax,jax_op,xla]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
from _child import run_child

ROUTES = ("op", "pallas_jax", "pallas_softmax", "jax_op", "xla")
COLS = 1024


def vm_hwm() -> int:
    """The process's peak resident set so far, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def _jax_body(x: jax.Array, y: jax.Array, *, alpha: float = 1.0) -> jax.Array:
    return x + alpha * y


def child(route: str, mib: int) -> dict:
    import jax
    import jax.numpy as jnp
    import torch

    from tpu_kernels import tpu_kernel
    from tpu_kernels.kernels import scale_add, softmax

    rows = mib * 2**20 // (4 * COLS)

    @jax.jit
    def xla(x, y):
        return x + 0.5 * y

    jax_op = tpu_kernel("interpret_memory::jax_add")(_jax_body)
    pallas_jax = scale_add.jax_function(alpha=0.5)

    x, y = torch.randn(rows, COLS), torch.randn(rows, COLS)
    result = {"route": route, "mib": mib, "out_bytes": x.nbytes}
    if route in ("op", "jax_op"):
        # The first call at a shape compiles and runs; both are in the figure.
        op = scale_add if route == "op" else jax_op
        _reset_hwm()
        before = vm_hwm()
        out = op(x, y, alpha=0.5)
        result["first_call_rise"] = vm_hwm() - before
        del out
        _reset_hwm()
        before = vm_hwm()
        op(x, y, alpha=0.5)
        result["second_call_rise"] = vm_hwm() - before
    else:
        # Compiled ahead from shapes alone, then run once: the compile's memory and the
        # run's, apart.
        fn = {"pallas_jax": pallas_jax, "xla": xla, "pallas_softmax": softmax.jax_function()}[route]
        arrays = [jnp.asarray(x.numpy())] + ([] if route == "pallas_softmax" else [jnp.asarray(y.numpy())])
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays]
        _reset_hwm()
        before = vm_hwm()
        compiled = fn.lower(*specs).compile()
        result["compile_rise"] = vm_hwm() - before
        _reset_hwm()
        before = vm_hwm()
        out = compiled(*arrays).block_until_ready()
        result["run_rise"] = vm_hwm() - before
        del out
    return result


def _reset_hwm() -> None:
    """Reset VmHWM to the current RSS (Linux: write 5 to /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _run_child(route: str, mib: int) -> dict:
    return run_child(
        __file__,
        ["--child", route, "--mib", str(mib)],
        what=f"interpret_memory child {route} {mib} MiB",
        cache_dir="off",
        timeout=600,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", default="128,256", help="output sizes in MiB, comma-separated")
    p.add_argument("--routes", default=",".join(ROUTES))
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, int(args.mib))))
        return 0
    print("peak resident memory rise (VmHWM), MiB, and as a multiple of the output's size")
    print("| route | output MiB | compile | run | first call (compile + run) | second call |")
    print("|---|---|---|---|---|---|")
    for mib in (int(m) for m in args.mib.split(",")):
        for route in args.routes.split(","):
            r = _run_child(route, mib)
            cells = [
                f"{r[k] / 2**20:.0f} ({r[k] / r['out_bytes']:.2f}x)" if k in r else ""
                for k in ("compile_rise", "run_rise", "first_call_rise", "second_call_rise")
            ]
            print(f"| {route} | {mib} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
