"""Where the attention op's time goes through torch on a TPU: a probe of the gap between the
family's JAX half and its torch op.

The attention record (bench/reports/chip_v5e_attention_family.json) has the op's forward through
torch at 0.80x torch_tpu's SDPA at two points where its JAX half alone is faster than SDPA's
whole torch call (qwen2-7b [1, 28, 4, 4352, 128]: 1450 us in JAX, 2025 us through torch, SDPA
1619 us). The torch call costs 73-816 us more than the JAX call, most where the sequence is
padded to a block. This probe times, at each point, variants that differ in one thing each:

  jax        jit(pallas.attention): out and lse                  (the JAX section's figure)
  jax_out    jit(pallas.attention)[0]: out alone
  op         tpu_kernels' attention op, as a user calls it (out alone returned; lse made)
  op_nolse   the op under torch.no_grad() with inputs that need no gradient (the same call:
             shows whether the op's residual handling costs anything)
  bare       torch.tpu.pallas.jax_op of pallas.attention: out and lse
  bare_out   torch.tpu.pallas.jax_op of pallas.attention, returning out alone
  bare_pre   bare_out on inputs already padded to the blocks (no pad or slice in the program)
  sdpa       torch_tpu's F.scaled_dot_product_attention(is_causal=True, enable_gqa=True)

Torch variants: n calls then one wait with each result's first element read (bench/torch_on_tpu.py
`per_call_us`, `read_first`), the best of `rounds`; beside it the host's cost of issuing the n
calls alone (`issue_us`, before the wait). JAX variants: `tpu_kernels.chip.measure.timed`.

    python3 bench/chip_attention_torch_probe.py [--out FILE] [--quick --interpret]
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

import jax  # at module level: torch_tpu's jax_op evaluates the probe functions' string annotations here

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tpu_kernels.chip import probes  # noqa: E402

# (model, heads, kv_heads, tokens, head_dim): the attention record's points, its two 0.80x
# first, then one that 512 divides (little gap) and a short one
POINTS = (
    ("qwen2-7b", 28, 4, 4352, 128),
    ("qwen2.5-32b", 40, 8, 9472, 128),
    ("gemma-7b", 16, 16, 4096, 256),
    ("llama-3.2-1b", 32, 8, 1408, 64),
)
QUICK = (("tiny", 2, 1, 200, 128),)


def _jax_rows(p: tuple, write, rounds: int) -> None:
    import jax.numpy as jnp

    from tpu_kernels.chip import load, measure

    pallas = load.family("attention").pallas  # torch-free, as the chip runner loads it

    model, h, hk, t, d = p
    keys = jax.random.split(jax.random.key(t), 3)
    q = jax.random.normal(keys[0], (1, h, t, d), jnp.bfloat16)
    k = jax.random.normal(keys[1], (1, hk, t, d), jnp.bfloat16)
    v = jax.random.normal(keys[2], (1, hk, t, d), jnp.bfloat16)
    fns = {
        "jax": lambda q, k, v: pallas.attention(q, k, v, causal=True),
        "jax_out": lambda q, k, v: pallas.attention(q, k, v, causal=True)[0],
    }
    for name, fn in fns.items():
        compiled, _, err = measure.compile_fn(fn, (q, k, v))
        row = {"point": model, "shape": [1, h, hk, t, d], "variant": name}
        if err:
            row["error"] = err
        else:
            s = measure.timed(compiled, (q, k, v), rounds=rounds)
            row["us"] = round(s * 1e6, 1)
            row["spread"] = None if s.spread is None else round(s.spread, 3)
        write(row)


def _torch_rows(p: tuple, write, rounds: int) -> None:
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from torch_on_tpu import per_call_us, read_first, sync

    from tpu_kernels.kernels import attention
    from tpu_kernels.kernels.attention import pallas

    model, h, hk, t, d = p
    dev = torch.device("tpu")
    torch.manual_seed(t)
    q = torch.randn(1, h, t, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, hk, t, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, hk, t, d, device=dev, dtype=torch.bfloat16)
    plan = pallas._plan(
        jax.ShapeDtypeStruct(q.shape, "bfloat16"),
        jax.ShapeDtypeStruct(k.shape, "bfloat16"),
        True,
        None,
        None,
        None,
    )
    qp = torch.nn.functional.pad(q, (0, 0, 0, plan.sq - t))
    kp = torch.nn.functional.pad(k, (0, 0, 0, plan.sk - t))
    vp = torch.nn.functional.pad(v, (0, 0, 0, plan.sk - t))
    jax_op = torch.tpu.pallas.jax_op  # type: ignore[attr-defined]

    def both(q: jax.Array, k: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
        return pallas.attention(q, k, v, causal=True)

    def out(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        return pallas.attention(q, k, v, causal=True)[0]

    def pre(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        return pallas.attention(q, k, v, causal=True, block_q=plan.bq, block_k=plan.bk)[0]

    tag = f"{t}x{h}x{hk}x{d}"
    bare = jax_op(f"tpu_kernels_probe::both_{tag}", both)
    bare_out = jax_op(f"tpu_kernels_probe::out_{tag}", out)
    bare_pre = jax_op(f"tpu_kernels_probe::pre_{tag}", pre)

    def op_nolse():
        with torch.no_grad():
            return attention(q, k, v, causal=True)

    calls = {
        "op": lambda: attention(q, k, v, causal=True),
        "op_nolse": op_nolse,
        "bare": lambda: bare(q, k, v),
        "bare_out": lambda: bare_out(q, k, v),
        "bare_pre": lambda: bare_pre(qp, kp, vp),
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=hk != h),
    }
    n = 8
    for name, call in calls.items():
        row = {"point": model, "shape": [1, h, hk, t, d], "variant": name, "padded_to": [plan.sq, plan.sk]}
        try:
            row["us"] = round(per_call_us(call, n=n, rounds=rounds, settle=read_first), 1)
            sync()
            t0 = time.perf_counter()
            results = [call() for _ in range(n)]
            row["issue_us"] = round((time.perf_counter() - t0) / n * 1e6, 1)
            read_first(results)
            sync()
        except Exception as e:  # a failure is recorded, not raised
            row["error"] = f"{type(e).__name__}: {e}"[:600]
        write(row)


def main(argv: list[str] | None = None) -> int:
    ap = probes.arguments(__doc__, "chip_attention_torch_probe.jsonl", {"jax": "JAX", "torch": "torch"})
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    if args.interpret:
        probes.use_interpreter()
    only = set(args.only.split(",")) - ({"torch"} if args.interpret else set())  # torch: a TPU
    points = QUICK if args.quick else POINTS
    with probes.lines(args.out) as write:
        for p in points:
            if "jax" in only:
                _jax_rows(p, write, args.rounds)
            if "torch" in only:
                _torch_rows(p, functools.partial(write), args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
