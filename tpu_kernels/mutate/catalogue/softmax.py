"""softmax's mutants (tpu_kernels/kernels/softmax/pallas.py): precision, max-subtraction, the
chunked wide-row body and its tail, the backward."""

from __future__ import annotations

from tpu_kernels.mutate.catalogue.base import (
    SOFTMAX,
    T_CHUNKS,
    T_SOFTMAX,
    Mutation,
    _check,
    family_mutants,
)

_softmax = family_mutants(SOFTMAX, T_SOFTMAX, "softmax")


MUTANTS: tuple[Mutation, ...] = (
    _softmax(
        "softmax-bf16-arithmetic",
        "    acc = _acc(o_ref.dtype)\n    if chunk",
        "    acc = o_ref.dtype\n    if chunk",
        "forward arithmetic (exp, sum, divide) in the input's bf16/f16 instead of float32",
    ),
    Mutation(
        "softmax-chunk-sum-not-rescaled",
        SOFTMAX,
        "total * jnp.exp(m - shift) + ",
        "total + ",
        "a wide row's online sum kept at the old max's scale when a later chunk raises the max",
        ("tests/kernels/test_vmem_defaults.py",),
        test_filter="chunk or wide",
        check=_check("softmax"),
    ),
    Mutation(
        "softmax-online-masked-max-unguarded",
        SOFTMAX,
        "shift = jnp.where(m_new == -jnp.inf, 0.0, m_new)",
        "shift = m_new",
        "the online max used as is while still -inf: a wide row whose first columns are all masked "
        "(-inf logits) becomes NaN",
        ("tests/kernels/test_vmem_defaults.py",),
        test_filter="masked",
        check=_check("softmax"),
    ),
    Mutation(
        "softmax-chunk-reads-the-first-chunk",
        SOFTMAX,
        "return pl.ds(pl.multiple_of(c * chunk, chunk), chunk)",
        "return pl.ds(0, chunk)",
        "every chunk of a wide row read from and written to the row's first columns (an offset dropped)",
        ("tests/kernels/test_vmem_defaults.py",),
        test_filter="chunk or wide",
        check=_check("softmax"),
    ),
    Mutation(
        "softmax-tail-left-out-of-the-stats",
        SOFTMAX,
        "    if tail:\n        m, total = _merged(m, total, _tail(x_ref, n, chunk, acc))\n",
        "",
        "a wide row's last, narrower chunk left out of its max and sum: its outputs pass 1 in total",
        T_CHUNKS,
        check=_check("softmax"),
    ),
    Mutation(
        "softmax-backward-tail-left-out-of-the-dot",
        SOFTMAX,
        "        s = s + jnp.sum(_tail(y_ref, n, chunk, acc) * _tail(dy_ref, n, chunk, acc), axis=-1, keepdims=True)\n",
        "        s = s\n",
        "the backward's sum(dy * y) misses a wide row's last, narrower chunk",
        T_CHUNKS,
        check=_check("softmax"),
    ),
    Mutation(
        "softmax-chunk-search-stops-at-two-lanes",
        SOFTMAX,
        "for lanes in range(CHUNK // 128, 0, -1)",
        "for lanes in range(CHUNK // 128, 1, -1)",
        "the chunk search stops at 2 lane groups: a row of 128 x p lanes, p a prime above 64, has no "
        "chunk, and softmax at [8, 8576] raises StopIteration while tracing",
        T_CHUNKS,
        check=_check("softmax"),
    ),
    _softmax(
        "softmax-no-max-subtraction",
        "e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))",
        "e = jnp.exp(x)",
        "exp of raw logits: overflows to inf (NaN output) above ~88.7 in float32",
    ),
    _softmax(
        "softmax-backward-bf16-arithmetic",
        "    acc = _acc(dx_ref.dtype)\n    if chunk",
        "    acc = dx_ref.dtype\n    if chunk",
        "backward arithmetic in the input's bf16/f16 instead of float32",
    ),
    _softmax(
        "softmax-backward-drops-the-sum",
        "(y * (dy - jnp.sum(dy * y, axis=-1, keepdims=True)))",
        "(y * dy)",
        "backward forgets the -sum(dy * y) term",
    ),
    _softmax(
        "softmax-sum-over-rows",
        "(e / jnp.sum(e, axis=-1, keepdims=True))",
        "(e / jnp.sum(e, axis=0, keepdims=True))",
        "normalises over the block's rows instead of the row",
    ),
    _softmax(
        "softmax-floor-grid",
        "grid=(pl.cdiv(rows, br),),",
        "grid=(rows // br,),",
        "floor instead of ceil: the last partial row block is never computed",
    ),
    _softmax(
        "softmax-no-dimension-semantics",
        "        compiler_params=row_params(footprint, br, cols, itemsize, chunk=chunk),\n        cost_estimate=cost(\n            flops_per_elem",
        "        cost_estimate=cost(\n            flops_per_elem",
        "grid left sequential: half of a two-core chip idle (a performance bug)",
    ),
)
