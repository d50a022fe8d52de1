"""The chip runner's grid: every shipped kernel and Pallas template at model shapes.

A `Point` is one kernel at one shape and dtype, at the kernel's defaults (or at the statics
given): how to make its inputs on the host, the Pallas function, the same math in XLA (the
kernel's JAX reference under jit; for attention `jax.nn.dot_product_attention` and JAX's own
Pallas flash attention), a float64 host check of an output, and its flops and bytes.

Shapes (`grid()`): row widths of real models' hidden and FFN sizes (2048-16384: Llama 3 8B
4096/14336, 13B-class 5120, 70B 8192) at 16 to 16k rows; vocabulary rows 32k-256k; matmuls
2048^3-8192^3, projection and FFN shapes, decode shapes (M = 1-64); attention at sequence
1k-8k with head_dim 64 and 128, causal or not; the shipped attention family (grouped kv heads)
and the fused LM head + loss (section "loss") at the grids their shapes.py names (`CHIP`);
bfloat16 and float32; and matmuls at widths no default block divides (MATMUL_RAGGED_*). `quick=True` gives a few
small points of each kind (the CPU test of the runner, in interpret mode).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tpu_kernels.chip import load

DTYPES = {"bf16": jnp.bfloat16, "f32": jnp.float32}


@dataclass
class Point:
    id: str
    section: str  # "rows", "matmul", "attention", "loss", "template"
    kernel: str  # "rmsnorm", "rmsnorm_backward", "template.flash_attention", ...
    dtype: str  # "bf16" / "f32"
    shape: tuple
    make: Callable[[np.random.Generator], tuple]  # host inputs (NumPy, in the point's dtypes)
    pallas: Callable  # JAX function of the inputs
    xla: dict[str, Callable]  # baseline name -> JAX function of the inputs
    check: Callable[[tuple, Any], float]  # (host inputs, outputs on host) -> normwise error
    flops: float
    bytes: float
    statics: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def bound(self) -> str:
        """Roofline side: "compute" when the point's flops per byte pass the chip's ridge (v5e:
        197e12 / 819e9 = 240 flops per byte), else "bandwidth"."""
        return "compute" if self.flops / max(self.bytes, 1) > 240 else "bandwidth"


def _randn(rng: np.random.Generator, shape: tuple, dtype: str, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(DTYPES[dtype])


def _two(rows: int, d: int, dt: str) -> Callable[[np.random.Generator], tuple]:
    """Inputs of an elementwise point: two fresh [rows, d] arrays."""
    return lambda rng: (_randn(rng, (rows, d), dt), _randn(rng, (rows, d), dt))


def _f64(a: Any) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def _err(y: Any, ref: np.ndarray) -> float:
    from tpu_kernels.chip.measure import normwise

    return normwise(_f64(y), ref)


def _itemsize(dtype: str) -> int:
    return jnp.dtype(DTYPES[dtype]).itemsize


# ---------------------------------------------------------------- host float64 references
def _reused(fn: Callable) -> Callable:
    """`fn` that returns its last result again when called with the very same arguments (the
    kernel and its XLA baseline are checked against one reference: at 8192 x 8192 a float64
    softmax is seconds of host time). The last arguments are held, so their ids cannot be
    reused by new arrays."""
    last: list = [None, None]

    @functools.wraps(fn)
    def wrapper(*args):
        if last[0] is not None and len(last[0]) == len(args) and all(a is b for a, b in zip(last[0], args)):
            return last[1]
        last[:] = [args, fn(*args)]
        return last[1]

    return wrapper


@_reused
def rmsnorm64(x, w, eps=1e-6):
    x, w = _f64(x), _f64(w)
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return x * r * w, r


@_reused
def rmsnorm_bwd64(x, w, r, dy):
    x, w, r, dy = map(_f64, (x, w, r, dy))
    xhat, g = x * r, dy * w
    dx = r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return dx, np.sum(dy * xhat, axis=0)


@_reused
def softmax64(x):
    x = _f64(x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@_reused
def softmax_bwd64(y, dy):
    y, dy = _f64(y), _f64(dy)
    return y * (dy - np.sum(dy * y, axis=-1, keepdims=True))


@_reused
def attention64(q, k, v, causal, scale):
    """One head: q [sq, d], k and v [sk, d] -> out [sq, d], lse [sq]."""
    q, k, v = _f64(q), _f64(k), _f64(v)
    s = q @ k.T * scale
    if causal:
        s = np.where(np.arange(k.shape[0])[None, :] <= np.arange(q.shape[0])[:, None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    return (p / l) @ v, (m + np.log(l))[:, 0]


@_reused
def attention_bwd64(q, k, v, do, causal, scale):
    q, k, v, do = _f64(q), _f64(k), _f64(v), _f64(do)
    s = q @ k.T * scale
    if causal:
        s = np.where(np.arange(k.shape[0])[None, :] <= np.arange(q.shape[0])[:, None], s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    out = p @ v
    dv = p.T @ do
    dp = do @ v.T
    ds = p * (dp - np.sum(do * out, axis=-1, keepdims=True))
    return ds @ k * scale, ds.T @ q * scale, dv


# ---------------------------------------------------------------- row kernels
def _rms_points(h: load.JaxHalf, shapes, dtypes, statics) -> list[Point]:
    p, ref = h.pallas, h.jax_reference
    points = []
    for rows, d in shapes:
        for dt in dtypes:
            n, it = rows * d, _itemsize(dt)
            fwd = functools.partial(p.rmsnorm, **statics)

            def make(rng, rows=rows, d=d, dt=dt):
                return _randn(rng, (rows, d), dt), _randn(rng, (d,), dt)

            def check(inputs, out):
                return _err(out[0], rmsnorm64(*inputs)[0])

            points.append(
                Point(
                    f"rmsnorm/{dt}[{rows},{d}]", "rows", "rmsnorm", dt, (rows, d), make, fwd,
                    {"xla": jax.jit(functools.partial(ref.rmsnorm_jax))}, check,
                    4 * n, 2 * n * it + 4 * rows, dict(statics),
                )
            )
            bwd = functools.partial(p.rmsnorm_backward, **statics)

            def make_b(rng, rows=rows, d=d, dt=dt):
                x, w = _randn(rng, (rows, d), dt), _randn(rng, (d,), dt)
                r = rmsnorm64(x, w)[1].astype(np.float32)
                return x, w, r, _randn(rng, (rows, d), dt)

            def check_b(inputs, out):
                dx, dw = rmsnorm_bwd64(*inputs)
                return max(_err(out[0], dx), _err(out[1], dw))

            points.append(
                Point(
                    f"rmsnorm_backward/{dt}[{rows},{d}]", "rows", "rmsnorm_backward", dt, (rows, d), make_b,
                    bwd, {"xla": ref.rmsnorm_backward_jax}, check_b,
                    8 * n, 3 * n * it + 4 * rows, dict(statics),
                )
            )
    return points


def _softmax_points(h: load.JaxHalf, shapes, dtypes, statics) -> list[Point]:
    p, ref = h.pallas, h.jax_reference
    points = []
    for rows, d in shapes:
        for dt in dtypes:
            n, it = rows * d, _itemsize(dt)

            def make(rng, rows=rows, d=d, dt=dt):
                return (_randn(rng, (rows, d), dt, 3.0),)

            def check(inputs, out):
                return _err(out, softmax64(*inputs))

            points.append(
                Point(
                    f"softmax/{dt}[{rows},{d}]", "rows", "softmax", dt, (rows, d), make,
                    functools.partial(p.softmax, **statics), {"xla": ref.softmax_jax}, check,
                    5 * n, 2 * n * it, dict(statics),
                )
            )

            def make_b(rng, rows=rows, d=d, dt=dt):
                y = softmax64(_randn(rng, (rows, d), dt, 3.0)).astype(DTYPES[dt])
                return y, _randn(rng, (rows, d), dt)

            def check_b(inputs, out):
                return _err(out, softmax_bwd64(*inputs))

            points.append(
                Point(
                    f"softmax_backward/{dt}[{rows},{d}]", "rows", "softmax_backward", dt, (rows, d), make_b,
                    functools.partial(p.softmax_backward, **statics), {"xla": ref.softmax_backward_jax},
                    check_b, 4 * n, 3 * n * it, dict(statics),
                )
            )
    return points


def _scale_add_points(h: load.JaxHalf, shapes, dtypes, statics) -> list[Point]:
    points = []
    for rows, d in shapes:
        for dt in dtypes:
            n, it = rows * d, _itemsize(dt)

            def check(inputs, out):
                x, y = map(_f64, inputs)
                return _err(out, x + 0.5 * y)

            points.append(
                Point(
                    f"scale_add/{dt}[{rows},{d}]", "rows", "scale_add", dt, (rows, d), _two(rows, d, dt),
                    functools.partial(h.pallas.scale_add, alpha=0.5, **statics),
                    {"xla": functools.partial(h.jax_reference.scale_add_jax, alpha=0.5)}, check,
                    2 * n, 3 * n * it, dict(statics),
                )
            )

            def make_b(rng, rows=rows, d=d, dt=dt):
                return (_randn(rng, (rows, d), dt),)

            def check_b(inputs, out):
                return _err(out, 0.5 * _f64(inputs[0]))

            points.append(
                Point(
                    f"scale_add_backward/{dt}[{rows},{d}]", "rows", "scale_add_backward", dt, (rows, d), make_b,
                    _dy(functools.partial(h.pallas.scale_add, alpha=0.5, **statics)),
                    {"xla": _dy(functools.partial(h.jax_reference.scale_add_jax, alpha=0.5))}, check_b,
                    n, 2 * n * it, dict(statics),
                )
            )
    return points


def _dy(fn: Callable) -> Callable:
    """d/dy of fn(x, y) at the incoming gradient g, as JAX derives it (jax.vjp: what the torch
    op's backward runs). d/dx is g itself. The primals are g too: the op is linear, so their
    values do not matter, and the forward they feed is dead code that jit drops (its lowering
    holds the backward's kernel alone)."""

    def dy(g):
        return jax.vjp(fn, g, g)[1](g)[1]

    return dy


# ---------------------------------------------------------------- matmul
CHECK_ROWS = 64  # rows of a matmul's output the host checks in float64


def _rows_of(m: int) -> np.ndarray:
    return np.unique(np.linspace(0, m - 1, min(m, CHECK_ROWS)).astype(int))


def matmul_point(fn: Callable, xla: dict, kernel: str, m: int, k: int, n: int, dt: str, statics: dict,
                 section: str = "matmul", note: str = "") -> Point:
    def make(rng):
        return _randn(rng, (m, k), dt), _randn(rng, (k, n), dt)

    def check(inputs, out):
        a, b = inputs
        rows = _rows_of(m)
        return _err(np.asarray(out)[rows], _f64(a[rows]) @ _f64(b))

    return Point(
        f"{kernel}/{dt}[{m},{k},{n}]" + "".join(f"/{k_}={v}" for k_, v in sorted(statics.items())),
        section, kernel, dt, (m, k, n), make, functools.partial(fn, **statics), xla, check,
        2 * m * k * n, (m * k + k * n + m * n) * _itemsize(dt), dict(statics), note,
    )


def _matmul_points(h: load.JaxHalf, shapes, dtypes, statics) -> list[Point]:
    xla = {"xla": h.jax_reference.matmul_jax}
    return [matmul_point(h.pallas.matmul, xla, "matmul", m, k, n, dt, statics) for (m, k, n) in shapes for dt in dtypes]


# ---------------------------------------------------------------- attention
def _jax_flash(causal: bool, scale: float, block: int = 512):
    """JAX's own Pallas flash attention at 512-blocks (its fastest in the issue's measurements),
    with blocks capped at the sequence."""
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    def run(q, k, v):
        sq, sk = q.shape[2], k.shape[2]
        bq, bk = min(block, sq), min(block, sk)
        sizes = fa.BlockSizes(
            block_q=bq, block_k_major=bk, block_k=bk, block_b=1,
            block_q_major_dkv=bq, block_k_major_dkv=bk, block_k_dkv=bk, block_q_dkv=bq,
            block_k_major_dq=bk, block_k_dq=bk, block_q_dq=bq,
        )
        return fa.flash_attention(q, k, v, causal=causal, sm_scale=scale, block_sizes=sizes)

    return run


def _xla_attention(causal: bool, scale: float):
    def run(q, k, v):  # jax.nn.dot_product_attention takes [batch, seq, heads, d]
        t = lambda a: jnp.swapaxes(a, 1, 2)  # noqa: E731
        return t(jax.nn.dot_product_attention(t(q), t(k), t(v), is_causal=causal, scale=scale))

    return run


def _grad_of(attn: Callable) -> Callable:
    """fwd + bwd of an attention function: (q, k, v, do) -> (dq, dk, dv)."""

    def run(q, k, v, do):
        _, vjp = jax.vjp(attn, q, k, v)
        return vjp(do)

    return run


def attention_points(fa: Any, shapes, dtypes, causals, statics: dict, *, backward: bool = True,
                     baselines: bool = True) -> list[Point]:
    """The flash-attention template (module `fa`) forward, and forward + backward.

    The forward point returns the attention output alone, as JAX's flash attention does without
    residuals and as a model's forward consumes it: the template's log-sum-exp (the residual its
    backward reads) stays inside the program. Each output buffer costs a dispatch-bound call
    host time on the v5e (measure.py), so timing (out, lse) against JAX's out compared two
    outputs with one, not the kernels. The forward + backward point has each side's residuals
    inside its program."""
    points = []
    for b, hds, s, d in shapes:
        for dt in dtypes:
            for causal in causals:
                scale = 1.0 / np.sqrt(d)
                tag = f"{dt}[{b},{hds},{s},{d}]" + ("/causal" if causal else "")
                tag += "".join(f"/{k_}={v}" for k_, v in sorted(statics.items()))
                flops = 4 * b * hds * s * s * d * (0.5 if causal else 1.0)
                nbytes = 4 * b * hds * s * d * _itemsize(dt)
                def fwd(q, k, v, causal=causal):
                    return fa.flash_attention(q, k, v, causal=causal, **statics)[0]

                def make(rng, b=b, hds=hds, s=s, d=d, dt=dt):
                    return tuple(_randn(rng, (b, hds, s, d), dt) for _ in range(3))

                def check(inputs, out, causal=causal, scale=scale):
                    q, k, v = (a[0, 0] for a in inputs)
                    out = out[0] if isinstance(out, (tuple, list)) else out  # a probe's (out, lse) variant
                    return _err(np.asarray(out)[0, 0], attention64(q, k, v, causal, scale)[0])

                xla = {}
                if baselines:
                    xla = {"jax_flash": _jax_flash(causal, scale), "xla": _xla_attention(causal, scale)}
                points.append(
                    Point(f"flash_attention/{tag}", "attention", "template.flash_attention", dt, (b, hds, s, d),
                          make, fwd, xla, check, flops, nbytes, dict(statics, causal=causal))
                )
                if not backward:
                    continue

                def template_grad(q, k, v, do, causal=causal):
                    out, lse = fa.flash_attention(q, k, v, causal=causal, **statics)
                    return fa.flash_attention_backward(q, k, v, out, lse, do, causal=causal, **statics)

                def make_b(rng, b=b, hds=hds, s=s, d=d, dt=dt):
                    return tuple(_randn(rng, (b, hds, s, d), dt) for _ in range(4))

                def check_b(inputs, out, causal=causal, scale=scale):
                    q, k, v, do = (a[0, 0] for a in inputs)
                    refs = attention_bwd64(q, k, v, do, causal, scale)
                    return max(_err(np.asarray(o)[0, 0], r) for o, r in zip(out, refs))

                xla_b = {}
                if baselines:
                    xla_b = {
                        "jax_flash": _grad_of(_jax_flash(causal, scale)),
                        "xla": _grad_of(_xla_attention(causal, scale)),
                    }
                points.append(
                    Point(f"flash_attention_fwd_bwd/{tag}", "attention", "template.flash_attention_fwd_bwd", dt,
                          (b, hds, s, d), make_b, template_grad, xla_b, check_b, 3.5 * flops, 2 * nbytes,
                          dict(statics, causal=causal), "forward + backward, each side")
                )
    return points


def repeated(fn: Callable, group: int) -> Callable:
    """fn(q, k, v) of equal head counts, called with k and v repeated to q's heads (a baseline
    without grouped kv heads: JAX's flash attention)."""

    def run(q, k, v):
        return fn(q, jnp.repeat(k, group, axis=1), jnp.repeat(v, group, axis=1))

    return run


def _attention_family_points(h: load.JaxHalf, shapes, dtypes) -> list[Point]:
    """The shipped attention family (grouped kv heads read in place), causal: the forward
    (`attention_out`, the output alone) and forward + backward, against XLA's attention
    (grouped natively) and JAX's flash attention with k and v repeated where a 512-, 256- or
    128-block divides the sequence. The host checks head 0's output, and its dq, in float64."""
    points = []
    for b, hds, hk, s, _, d in shapes:
        group, scale = hds // hk, 1.0 / np.sqrt(d)
        for dt in dtypes:
            tag = f"{dt}[{b},{hds},{hk},{s},{d}]/causal"
            flops = 4 * b * hds * s * s * d * 0.5
            nbytes = 2 * b * (hds + hk) * s * d * _itemsize(dt)
            block = next((x for x in (512, 256, 128) if s % x == 0), None)
            fwd_xla = {"xla": functools.partial(h.jax_reference.attention_xla, causal=True, scale=scale)}
            if block:
                fwd_xla["jax_flash"] = repeated(_jax_flash(True, scale, block), group)

            def fwd(q, k, v):
                return h.pallas.attention_out(q, k, v, causal=True)

            def make(rng, b=b, hds=hds, hk=hk, s=s, d=d, dt=dt):
                return _randn(rng, (b, hds, s, d), dt), *(_randn(rng, (b, hk, s, d), dt) for _ in range(2))

            def check(inputs, out, scale=scale):
                q, k, v = (a[0, 0] for a in inputs)
                return _err(np.asarray(out)[0, 0], attention64(q, k, v, True, scale)[0])

            points.append(Point(f"attention/{tag}", "attention", "attention", dt, (b, hds, hk, s, d), make, fwd,
                                fwd_xla, check, flops, nbytes, {"causal": True}))

            def grad(q, k, v, do):
                out, lse = h.pallas.attention(q, k, v, causal=True)
                return h.pallas.attention_backward(q, k, v, out, lse, do, causal=True)

            def make_b(rng, b=b, hds=hds, hk=hk, s=s, d=d, dt=dt):
                q, k, v = make(rng, b, hds, hk, s, d, dt)
                return q, k, v, _randn(rng, (b, hds, s, d), dt)

            def check_b(inputs, out, scale=scale):
                q, k, v, do = (a[0, 0] for a in inputs)
                return _err(np.asarray(out[0])[0, 0], attention_bwd64(q, k, v, do, True, scale)[0])

            points.append(Point(f"attention_fwd_bwd/{tag}", "attention", "attention_fwd_bwd", dt,
                                (b, hds, hk, s, d), make_b, grad, {n: _grad_of(f) for n, f in fwd_xla.items()},
                                check_b, 3.5 * flops, 2 * nbytes, {"causal": True}, "forward + backward, each side"))
    return points


# ---------------------------------------------------------------- the fused LM head and loss
CHECK_TOKENS = 64  # tokens whose loss (and hidden gradient) the host checks in float64


def _lce64(h, w, y, tokens: int):
    """The first `tokens` tokens' losses and hidden gradients of a mean loss over all `y`'s
    non-ignored (-100) labels, in float64: [tokens], [tokens, d]."""
    hf, wf, yy = _f64(h[:tokens]), _f64(w), np.asarray(y[:tokens])
    z = hf @ wf.T
    m = z.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(-1, keepdims=True)))[:, 0]
    kept = yy != -100
    picked = z[np.arange(tokens), np.where(kept, yy, 0)]
    p = np.exp(z - lse[:, None])
    p[np.arange(tokens), np.where(kept, yy, 0)] -= 1.0
    dh = np.where(kept[:, None], p @ wf, 0.0) / max(int(np.sum(np.asarray(y) != -100)), 1)
    return np.where(kept, lse - picked, 0.0), dh


def _lce_points(h: load.JaxHalf, shapes, dtypes) -> list[Point]:
    """linear_cross_entropy (hidden [tokens, d], weight [vocabulary, d], labels, every fifth
    ignored) against XLA's unfused `cross_entropy(hidden @ weight.T, labels)`: the loss alone
    (`linear_cross_entropy_loss`, each token's: reduction "none") and the mean loss with its
    gradients for hidden and weight. Flops are the unfused path's (one matmul forward, three
    forward + backward). The host checks the first CHECK_TOKENS tokens' losses (and hidden
    gradients) in float64."""
    points = []
    for tokens, d, vocab in shapes:
        for dt in dtypes:
            tag = f"{dt}[{tokens},{d},{vocab}]"
            unit = 2.0 * tokens * d * vocab
            nbytes = (tokens * d + vocab * d) * _itemsize(dt) + 4 * tokens

            def make(rng, tokens=tokens, d=d, vocab=vocab, dt=dt):
                y = rng.integers(0, vocab, tokens).astype(np.int32)
                y[::5] = -100
                return _randn(rng, (tokens, d), dt), _randn(rng, (vocab, d), dt, 1.0 / np.sqrt(d)), y

            def fwd(x, w, y):
                return h.pallas.linear_cross_entropy_loss(x, w, y, reduction="none")

            def check(inputs, out):
                return _err(np.asarray(out)[:CHECK_TOKENS], _lce64(*inputs, CHECK_TOKENS)[0])

            xla = functools.partial(h.jax_reference.linear_cross_entropy_xla, reduction="none")
            points.append(Point(f"linear_cross_entropy/{tag}", "loss", "linear_cross_entropy", dt,
                                (tokens, d, vocab), make, fwd, {"xla": xla}, check, unit, nbytes))

            def step(x, w, y):
                loss, lse, dh = h.pallas.linear_cross_entropy(x, w, y)
                return loss, *h.pallas.linear_cross_entropy_backward(x, w, y, loss, lse, dh, jnp.ones_like(loss))

            def xla_step(x, w, y):
                loss, grads = jax.value_and_grad(h.jax_reference.linear_cross_entropy_xla, argnums=(0, 1))(x, w, y)
                return loss, *grads

            def check_b(inputs, out):
                return _err(np.asarray(out[1])[:CHECK_TOKENS], _lce64(*inputs, CHECK_TOKENS)[1])

            points.append(Point(f"linear_cross_entropy_fwd_bwd/{tag}", "loss", "linear_cross_entropy_fwd_bwd", dt,
                                (tokens, d, vocab), make, step, {"xla": xla_step}, check_b, 3 * unit, 2 * nbytes,
                                {}, "forward + backward (mean loss), each side"))
    return points


# ---------------------------------------------------------------- templates (besides attention)
def _template_points(shapes_rows, mm_shapes, dtypes) -> list[Point]:
    points = []
    ew = load.template("elementwise")
    rr = load.template("row_reduction")
    mm = load.template("matmul")
    for rows, d in shapes_rows:
        for dt in dtypes:
            n, it = rows * d, _itemsize(dt)

            def check_ew(inputs, out):
                x, y = map(_f64, inputs)
                return _err(out, 0.5 * x + y)

            def ew_xla(x, y):
                acc = jnp.promote_types(x.dtype, jnp.float32)
                return (0.5 * x.astype(acc) + y.astype(acc)).astype(x.dtype)

            points.append(Point(f"template.elementwise/{dt}[{rows},{d}]", "template", "template.elementwise", dt,
                                (rows, d), _two(rows, d, dt), functools.partial(ew.elementwise, alpha=0.5), {"xla": ew_xla},
                                check_ew, 2 * n, 3 * n * it))

            def make_rr(rng, rows=rows, d=d, dt=dt):
                return _randn(rng, (rows, d), dt), _randn(rng, (d,), dt)

            def check_rr(inputs, out):
                return _err(out[0], rmsnorm64(*inputs)[0])

            rms_ref = load.family("rmsnorm").jax_reference
            points.append(Point(f"template.row_reduction/{dt}[{rows},{d}]", "template", "template.row_reduction", dt,
                                (rows, d), make_rr, rr.row_reduction, {"xla": rms_ref.rmsnorm_jax}, check_rr,
                                4 * n, 2 * n * it))

            def make_rrb(rng, rows=rows, d=d, dt=dt):
                x, w = _randn(rng, (rows, d), dt), _randn(rng, (d,), dt)
                return x, w, rmsnorm64(x, w)[1].astype(np.float32), _randn(rng, (rows, d), dt)

            def check_rrb(inputs, out):
                dx, dw = rmsnorm_bwd64(*inputs)
                return max(_err(out[0], dx), _err(out[1], dw))

            points.append(Point(f"template.row_reduction_backward/{dt}[{rows},{d}]", "template",
                                "template.row_reduction_backward", dt, (rows, d), make_rrb, rr.row_reduction_backward,
                                {"xla": rms_ref.rmsnorm_backward_jax}, check_rrb, 8 * n, 3 * n * it))
    mm_ref = load.family("matmul").jax_reference.matmul_jax
    for m, k, n in mm_shapes:
        for dt in dtypes:
            points.append(matmul_point(mm.matmul, {"xla": mm_ref}, "template.matmul", m, k, n, dt, {},
                                       section="template"))
    return points


ROW_BUILDERS = {"rmsnorm": _rms_points, "softmax": _softmax_points, "scale_add": _scale_add_points}


def row_points(family: str, shapes, dtypes, statics: dict) -> list[Point]:
    """A row family's points (rmsnorm's and softmax's: forward and backward)."""
    return ROW_BUILDERS[family](load.family(family), shapes, dtypes, statics)


# ---------------------------------------------------------------- the grid
ROWS = [(16, 4096), (2048, 4096), (8192, 4096), (16384, 2048), (4096, 5120), (8192, 8192), (4096, 14336),
        (1024, 16384)]
SOFTMAX = [(4096, 1024), (4096, 4096), (8192, 8192), (2048, 32768), (512, 131072), (8, 131072),
           (256, 262144)]
SCALE_ADD = [(16, 4096), (4096, 4096), (8192, 14336)]
MATMUL_BF16 = [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (8192, 4096, 14336),
               (8192, 14336, 4096), (8192, 4096, 4096), (8192, 4096, 1024), (1, 4096, 14336),
               (16, 4096, 14336), (64, 4096, 4096), (64, 14336, 4096)]
MATMUL_F32 = [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 4096, 14336), (16, 4096, 14336)]
# Widths no default block divides (issue 58: a 7B model's 3584 and 18944, a batch of 3000 rows, decode
# at those widths), where the kernel once padded its operands with a copy.
MATMUL_RAGGED_BF16 = [(4096, 3584, 18944), (4096, 18944, 3584), (4096, 3584, 3584), (3000, 4096, 4096),
                      (8, 3584, 18944), (128, 4096, 14336)]
MATMUL_RAGGED_F32 = [(4096, 3584, 4096)]
ATTENTION = [(1, 8, s, 128) for s in (1024, 2048, 4096, 8192)] + [(1, 16, s, 64) for s in (2048, 8192)]
TEMPLATE_ROWS = [(8192, 4096)]
TEMPLATE_MM = [(4096, 4096, 4096)]


def grid(*, quick: bool = False, sections: tuple[str, ...] = ("rows", "matmul", "attention", "loss", "template"),
         statics: dict[str, dict] | None = None) -> list[Point]:
    """Every point of the runner's grid (or, `quick`, a few small ones of each kind).
    `statics` overrides a kernel's defaults by family name (e.g. {"matmul": {"block_m": 256}})."""
    statics = statics or {}
    if quick:
        rows, soft, sa = [(16, 256), (40, 512)], [(16, 256), (8, 1024)], [(16, 256)]
        mm_bf16, mm_f32, attn = [(64, 256, 256), (8, 256, 384)], [(64, 256, 128)], [(1, 2, 256, 128)]
        t_rows, t_mm, dtypes = [(16, 256)], [(128, 256, 256)], ("bf16", "f32")
    else:
        rows, soft, sa, mm_bf16, mm_f32, attn = ROWS, SOFTMAX, SCALE_ADD, MATMUL_BF16, MATMUL_F32, ATTENTION
        t_rows, t_mm, dtypes = TEMPLATE_ROWS, TEMPLATE_MM, ("bf16", "f32")
    points: list[Point] = []
    if "rows" in sections:
        for family, shapes in (("rmsnorm", rows), ("softmax", soft), ("scale_add", sa)):
            points += row_points(family, shapes, dtypes, statics.get(family, {}))
    if "matmul" in sections:
        mm = load.family("matmul")
        points += _matmul_points(mm, mm_bf16, ("bf16",), statics.get("matmul", {}))
        points += _matmul_points(mm, mm_f32, ("f32",), statics.get("matmul", {}))
        if not quick:
            points += _matmul_points(mm, MATMUL_RAGGED_BF16, ("bf16",), statics.get("matmul", {}))
            points += _matmul_points(mm, MATMUL_RAGGED_F32, ("f32",), statics.get("matmul", {}))
    if "attention" in sections:
        fa = load.template("flash_attention")
        points += attention_points(fa, attn, ("bf16",), (False, True), statics.get("flash_attention", {}))
        points += attention_points(fa, attn[1:2], ("f32",), (True,), statics.get("flash_attention", {}))
        family = load.family("attention")
        chip = [(1, 2, 1, 200, 200, 128)] if quick else list(family.shapes.CHIP.values())
        points += _attention_family_points(family, chip, ("bf16",))
        points += _attention_family_points(family, chip[:1], ("f32",))
    if "loss" in sections:
        family = load.family("linear_cross_entropy")
        chip = [(72, 128, 300)] if quick else list(family.shapes.CHIP.values())
        points += _lce_points(family, chip, ("bf16",))
    if "template" in sections:
        points += _template_points(t_rows, t_mm, dtypes)
    return points


__all__ = ["Point", "attention_points", "grid", "matmul_point", "repeated", "row_points"]
