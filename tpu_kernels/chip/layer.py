"""A Llama-style decoder layer two ways, for the chip runner: from the shipped kernels (matmul,
rmsnorm, attention, and matmul's gated kernels for the FFN's down projection with its gate
fused in) at their defaults, and from XLA's matmuls, XLA's rmsnorm (the family's JAX
reference) and JAX's own Pallas flash attention (512-blocks).

    h = rmsnorm(x); q, k, v = h Wq, h Wk, h Wv; o = attention(q, k, v, causal)
    x = x + o Wo; h = rmsnorm(x); x = x + (silu(h Wg) * (h Wu)) Wd

Forward, and forward + backward (the gradient of every input and weight for a given output
cotangent). Each piece's backward is the one its torch op runs, through `jax.custom_vjp`:
the backward kernels of rmsnorm, matmul (the same kernel reading b and a transposed), the
gated down projection and attention. A forward alone runs attention's visible kernel (no lse),
as the op's call needing no gradient does. Our attention reads its heads in place from the
projections (the family's by-token kernels, head_dim a multiple of 128); JAX's flash attention
takes [batch, heads, seq, head_dim], so XLA's side transposes q, k, v and the output. Our side
adds the two residuals in the epilogues of the output and down projections (matmul's
`matmul_add`, the gated `swiglu_matmul_add`: the accumulator starts from x's tile); XLA's side
adds them as JAX, which XLA fuses into its dots' outputs, and runs silu(g) * u as JAX. The
forward's error is against a float64 forward on the host; the gradients are compared with the
XLA layer's (no float64 backward).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tpu_kernels import wiring
from tpu_kernels.chip import load, measure

ATTENTION = "attention family"
"""What the layer's own side attends with, as its rows name it (rows without the field ran the
flash-attention template, the layer's attention before the shipped family: report.attention_of)."""


FFN_DOWN = "swiglu_matmul"
"""What the layer's own side computes (silu(g) * u) @ wd with, as its rows name it: matmul's
gated kernels (rows without the field ran silu(g) * u in JAX, then the matmul)."""


BY_TOKEN = "by token"
"""How the layer's own side hands attention its heads, as its rows name it: q, k and v read in
place from [tokens, heads * head_dim] (rows without the field transposed them to [heads,
tokens, head_dim] and the output back)."""


RESIDUAL = "in the epilogue"
"""Where the layer's own side adds its residuals, as its rows name it: the accumulators of the
output and down projections start from x (rows without the field added them after, as JAX)."""


def shapes(quick: bool) -> list[dict[str, int]]:
    if quick:
        return [dict(tokens=256, d=256, heads=2, head_dim=128, ffn=512)]
    return [dict(tokens=2048, d=4096, heads=32, head_dim=128, ffn=14336)]  # Llama 3 8B widths, MHA


def _kernels(statics: dict):
    mm = load.family("matmul").pallas
    rms = load.family("rmsnorm").pallas
    attn = load.family("attention").pallas
    mm_kw, rms_kw, fa_kw = statics.get("matmul", {}), statics.get("rmsnorm", {}), statics.get("attention", {})

    @jax.custom_vjp
    def matmul(a, b):
        return mm.matmul(a, b, **mm_kw)

    def matmul_fwd(a, b):
        return matmul(a, b), (a, b)

    def matmul_bwd(res, g):  # as the op's backward: the kernel, reading b and a transposed
        return mm.matmul_backward(*res, g, **mm_kw)

    matmul.defvjp(matmul_fwd, matmul_bwd)

    @jax.custom_vjp
    def matmul_add(a, b, c):  # a residual added in the product's epilogue: c's gradient is g itself
        return mm.matmul_add(a, b, c, **mm_kw)

    def matmul_add_fwd(a, b, c):
        return matmul_add(a, b, c), (a, b)

    def matmul_add_bwd(res, g):
        return (*mm.matmul_backward(*res, g, **mm_kw), g)

    matmul_add.defvjp(matmul_add_fwd, matmul_add_bwd)

    @jax.custom_vjp
    def rmsnorm(x, w):
        return rms.rmsnorm(x, w, **rms_kw)[0]

    def rmsnorm_fwd(x, w):
        y, r = rms.rmsnorm(x, w, **rms_kw)
        return y, (x, w, r)

    def rmsnorm_bwd(res, g):
        x, w, r = res
        return rms.rmsnorm_backward(x, w, r, g, **rms_kw)

    rmsnorm.defvjp(rmsnorm_fwd, rmsnorm_bwd)

    attention = _causal_attention(attn.attention_out, attn.attention, attn.attention_backward, fa_kw)
    return matmul, rmsnorm, attention, matmul_add


def _causal_attention(visible, forward, backward, fa_kw: dict):
    """Causal attention through `jax.custom_vjp`, as the op runs it: `visible` (out alone) where
    no gradient is asked, `forward` (out and lse) and `backward` where one is."""

    @jax.custom_vjp
    def attention(q, k, v):
        return visible(q, k, v, causal=True, **fa_kw)

    def attention_fwd(q, k, v):
        out, lse = forward(q, k, v, causal=True, **fa_kw)
        return out, (q, k, v, out, lse)

    def attention_bwd(res, g):
        return backward(*res, g, causal=True, **fa_kw)

    attention.defvjp(attention_fwd, attention_bwd)
    return attention


def _gated_down(statics: dict):
    """The FFN's down projection with its gate fused in, (silu(g) * u) @ wd, and its backward:
    matmul's gated kernels (kernels/matmul/gated.py), at matmul's statics."""
    load.family("matmul")  # its package, bare where torch is absent
    gated = wiring.registered("tpu_kernels.kernels.matmul.gated")
    mm_kw = statics.get("matmul", {})

    @jax.custom_vjp
    def down(g, u, w):
        return gated.swiglu_matmul(g, u, w, **mm_kw)

    def down_fwd(g, u, w):
        return down(g, u, w), (g, u, w)

    def down_bwd(res, d):
        return gated.swiglu_matmul_backward(*res, d, **mm_kw)

    down.defvjp(down_fwd, down_bwd)

    @jax.custom_vjp
    def down_add(g, u, w, c):  # the residual added in the epilogue: c's gradient is d itself
        return gated.swiglu_matmul_add(g, u, w, c, **mm_kw)

    def down_add_fwd(g, u, w, c):
        return down_add(g, u, w, c), (g, u, w)

    def down_add_bwd(res, d):
        return (*gated.swiglu_matmul_backward(*res, d, **mm_kw), d)

    down_add.defvjp(down_add_fwd, down_add_bwd)
    return down, down_add


def _attention_by_token(statics: dict):
    """Causal attention over q, k, v [1, tokens, heads, head_dim], each head read in place from
    the projections' [tokens, heads * head_dim] (the family's by-token kernels: no transpose
    around attention), with its backward; the layer falls back to transposes where head_dim is
    not a multiple of 128."""
    attn = load.family("attention").pallas
    return _causal_attention(attn.attention_out_by_token, attn.attention_by_token, attn.attention_backward_by_token,
                             statics.get("attention", {}))


def _xla_kernels():
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    ref = load.family("rmsnorm").jax_reference
    mm_ref = load.family("matmul").jax_reference

    def attention(q, k, v):
        s = q.shape[2]
        b = min(512, s)
        sizes = fa.BlockSizes(block_q=b, block_k_major=b, block_k=b, block_b=1, block_q_major_dkv=b,
                              block_k_major_dkv=b, block_k_dkv=b, block_q_dkv=b, block_k_major_dq=b,
                              block_k_dq=b, block_q_dq=b)
        return fa.flash_attention(q, k, v, causal=True, sm_scale=1.0 / np.sqrt(q.shape[-1]), block_sizes=sizes)

    return mm_ref.matmul_jax, (lambda x, w: ref.rmsnorm_jax(x, w)[0]), attention


def _layer(matmul, rmsnorm, attention, heads: int, head_dim: int, gated_down=None, attention_by_token=None,
           matmul_add=None, gated_down_add=None):
    """The layer from these pieces; `gated_down(g, u, wd)`, where given, computes the FFN's
    (silu(g) * u) @ wd in one call, where the unfused layer runs silu(g) * u as JAX and then
    `matmul`; `attention_by_token(q, k, v)`, where given, attends over [1, tokens, heads,
    head_dim] (a reshape of the projections, no copy), where `attention` takes [1, heads, tokens,
    head_dim] (a transpose each way); `matmul_add(a, b, c)` and `gated_down_add(g, u, wd, c)`,
    where given, add the residual c in the product's epilogue, where the unfused layer adds it
    after (as JAX: XLA fuses it into its own dot's output)."""
    if gated_down is None:

        def gated_down(g, u, w):
            return matmul(jax.nn.silu(g) * u, w)

    if matmul_add is None:

        def matmul_add(a, b, c):
            return c + matmul(a, b)

    if gated_down_add is None:

        def gated_down_add(g, u, w, c):
            return c + gated_down(g, u, w)

    def run(x, w1, w2, wq, wk, wv, wo, wg, wu, wd):
        t = x.shape[0]

        def split(a):  # [t, heads * head_dim] -> [1, heads, t, head_dim]
            return a.reshape(t, heads, head_dim).transpose(1, 0, 2)[None]

        h = rmsnorm(x, w1)
        q, k, v = matmul(h, wq), matmul(h, wk), matmul(h, wv)
        if attention_by_token is not None:
            o = attention_by_token(*(a.reshape(1, t, heads, head_dim) for a in (q, k, v))).reshape(t, heads * head_dim)
        else:
            o = attention(split(q), split(k), split(v))[0].transpose(1, 0, 2).reshape(t, heads * head_dim)
        x = matmul_add(o, wo, x)
        h = rmsnorm(x, w2)
        return gated_down_add(matmul(h, wg), matmul(h, wu), wd, x)

    return run


def _inputs(dims: dict[str, int], rng: np.random.Generator) -> list[np.ndarray]:
    t, d, f = dims["tokens"], dims["d"], dims["ffn"]

    def w(*shape, scale=1.0):
        return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(jnp.bfloat16)

    return [w(t, d), w(d), w(d), w(d, d, scale=d**-0.5), w(d, d, scale=d**-0.5), w(d, d, scale=d**-0.5),
            w(d, d, scale=d**-0.5), w(d, f, scale=d**-0.5), w(d, f, scale=d**-0.5), w(f, d, scale=f**-0.5)]


def _forward64(args: list[np.ndarray], heads: int, head_dim: int) -> np.ndarray:
    """The layer in float64 on the host, from the same bf16 inputs."""
    x, w1, w2, wq, wk, wv, wo, wg, wu, wd = (np.asarray(a).astype(np.float64) for a in args)
    t = x.shape[0]

    def rms(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w

    h = rms(x, w1)
    q, k, v = (np.ascontiguousarray((h @ wt).reshape(t, heads, head_dim).transpose(1, 0, 2)) for wt in (wq, wk, wv))
    mask = np.arange(t)[None, :] <= np.arange(t)[:, None]
    o = np.empty_like(q)
    for i in range(heads):
        s = np.where(mask, q[i] @ k[i].T / np.sqrt(head_dim), -np.inf)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        o[i] = (p / p.sum(axis=-1, keepdims=True)) @ v[i]
    x = x + o.transpose(1, 0, 2).reshape(t, heads * head_dim) @ wo
    h = rms(x, w2)
    g = h @ wg
    return x + (g / (1 + np.exp(-g)) * (h @ wu)) @ wd


def pieces(statics: dict, head_dim: int) -> dict[str, Any]:
    """The layer's own side, piece by piece, as `measure_layer` composes it: matmul, rmsnorm and
    attention (`_kernels`), the gated down projection, attention by token where head_dim allows
    (else None: the transposes around `attention`), and the residual adds in the epilogues of
    the output projection (`matmul_add`) and the down projection (`gated_down_add`)."""
    matmul, rmsnorm, attention, matmul_add = _kernels(statics)
    by_token = _attention_by_token(statics) if head_dim % 128 == 0 else None
    down, down_add = _gated_down(statics)
    return dict(matmul=matmul, rmsnorm=rmsnorm, attention=attention, gated_down=down, attention_by_token=by_token,
                matmul_add=matmul_add, gated_down_add=down_add)


def own_layer(p: dict[str, Any], heads: int, head_dim: int):
    """The layer from the shipped kernels' `pieces`."""
    return _layer(p["matmul"], p["rmsnorm"], p["attention"], heads, head_dim, gated_down=p["gated_down"],
                  attention_by_token=p["attention_by_token"], matmul_add=p["matmul_add"],
                  gated_down_add=p["gated_down_add"])


def xla_layer(heads: int, head_dim: int):
    """The layer from XLA's matmuls and rmsnorm and JAX's flash attention."""
    return _layer(*_xla_kernels(), heads, head_dim)


def measure_layer(dims: dict[str, int], *, backward: bool, rounds: int, floor_s: float, statics: dict) -> dict[str, Any]:
    heads, head_dim = dims["heads"], dims["head_dim"]
    rng = np.random.default_rng(0)
    host = _inputs(dims, rng)
    args = [jax.device_put(a) for a in host]
    p = pieces(statics, head_dim)
    gated, by_token = p["gated_down"], p["attention_by_token"]
    ours, theirs = own_layer(p, heads, head_dim), xla_layer(heads, head_dim)
    if backward:
        cot = jax.device_put((rng.standard_normal(host[0].shape, dtype=np.float32)).astype(jnp.bfloat16))

        def grads(f):
            def g(*a):
                _, vjp = jax.vjp(f, *a)
                return vjp(cot)

            return g

        ours, theirs = grads(ours), grads(theirs)
    row: dict[str, Any] = {"id": f"decoder_layer/{'fwd_bwd' if backward else 'fwd'}/bf16" + "".join(
        f"/{k}={v}" for k, v in dims.items()), "dims": dims, "backward": backward, "attention": ATTENTION}
    if gated is not None:
        row["ffn_down"] = FFN_DOWN
    if by_token is not None:
        row["attention_layout"] = BY_TOKEN
    if p["matmul_add"] is not None:
        row["residual"] = RESIDUAL
    outs, compiled = {}, {}
    for name, fn in (("ours", ours), ("xla", theirs)):
        c, compile_s, error = measure.compile_fn(fn, args)
        row[f"{name}_compiles"] = error is None
        if error is not None:
            row[f"{name}_error"] = error
            continue
        try:
            outs[name] = jax.device_get(c(*args))
            compiled[name] = c
        except Exception as e:  # a runtime failure is a verdict too
            row[f"{name}_run_error"] = measure.error_text(e)
    # as run.run_point: a cross-program prefetch on either side, and both cycle through copies
    prefetch = {name: measure.cross_program_prefetch(c) for name, c in compiled.items()}
    sets = measure.copies(args) if any(prefetch.values()) else None
    if sets is not None:
        row["rotated"] = len(sets)
    for name, c in compiled.items():
        row[f"{name}_cross_program_prefetch"] = prefetch[name]
        try:
            row[f"{name}_ms"] = round(measure.timed(c, args, rounds=rounds, sets=sets) * 1e3, 3)
            if sets is not None:
                row[f"{name}_same_inputs_ms"] = round(measure.timed(c, args, rounds=rounds) * 1e3, 3)
        except Exception as e:  # a runtime failure is a verdict too
            row[f"{name}_run_error"] = measure.error_text(e)
    del compiled, sets
    if "ours_ms" in row and "xla_ms" in row:
        row["speed_vs_xla"] = round(row["xla_ms"] / row["ours_ms"], 3)
    if not backward and outs:
        ref = _forward64(host, heads, head_dim)
        for name, out in outs.items():
            row[f"error_{name}_vs_f64"] = measure.normwise(out, ref)
    elif len(outs) == 2:
        row["error_grads_ours_vs_xla"] = max(
            measure.normwise(a, b) for a, b in zip(jax.tree_util.tree_leaves(outs["ours"]),
                                                   jax.tree_util.tree_leaves(outs["xla"]))
        )
    return row


__all__ = ["measure_layer", "own_layer", "pieces", "shapes", "xla_layer"]
