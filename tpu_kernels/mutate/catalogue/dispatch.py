"""Toolkit mutants of the dispatch layer (tpu_kernels/dispatch, tpu_kernels/definition): the eager
shortcut, derived fakes, buckets, signatures."""

from __future__ import annotations

from tpu_kernels.mutate.catalogue.base import (
    BUCKETS,
    BUCKETS_FAST,
    EAGER,
    FAKE,
    T_BUCKETS,
    T_EAGER,
    T_FAKE,
    Mutation,
    _toolkit,
)

MUTANTS: tuple[Mutation, ...] = (
    # ---- issue #39's ten survivors ----
    _toolkit(
        "buckets-pad-with-zero",
        BUCKETS,
        "            out = t.new_full(shape, b.pad)",
        "            out = t.new_full(shape, 0)",
        "padding holds 0 instead of the declared pad value: a -inf-padded row max returns 0s",
        T_BUCKETS,
        BUCKETS_FAST,
    ),
    _toolkit(
        "eager-try-all-keeps-int-for-float",
        EAGER,
        "        for i in self.floats:\n            if type(values[i]) is int:\n"
        "                if not -DOUBLE_OVERFLOW < values[i] < DOUBLE_OVERFLOW:\n                    return DECLINED\n"
        "                values = values[:i] + (float(values[i]),) + values[i + 1 :]\n",
        "",
        "try_all traces an int given for a float static: int32 where the dispatcher gives float32, "
        "and a later 2.0 reuses that entry",
        T_EAGER,
    ),
    _toolkit(
        "fake-cache-keyed-on-shapes-only",
        FAKE,
        "            out.append((tuple(v.shape), v.dtype))\n    return tuple(out)",
        "            out.append(tuple(v.shape))\n    return tuple(out)",
        "a bfloat16 meta call after a float32 one of the same shape gets float32",
        T_FAKE,
    ),
    # ---- issue 46's faults, each fixed ----
    _toolkit(
        "nested-tensor-let-through",
        "tpu_kernels/definition/signature.py",
        "            if value.is_nested:",
        "            if False:",
        "a nested tensor gets torch's dispatcher error, naming neither the op's argument nor the fix",
        ("tests/test_user_errors.py",),
    ),
    _toolkit(
        "eager-shortcut-takes-tensors-needing-grad",
        EAGER,
        "        or (grad and t.requires_grad)\n",
        "",
        "the shortcut runs a call whose inputs need gradients: the result has no grad_fn",
        T_EAGER,
    ),
    _toolkit(
        "eager-key-without-dtype",
        EAGER,
        "                key.append((shape, dtype))",
        "                key.append(shape)",
        "the shortcut keys an op with optional tensors on shapes only: never the executor's key, so "
        "every call misses the one-pass path (results stay right; the shortcut's saving is lost)",
        T_EAGER,
    ),
    _toolkit(
        "eager-one-pass-takes-non-contiguous",
        EAGER,
        "                if not t.is_contiguous():\n"
        "                    return executor(*args)  # the executor copies (or refuses) as the op says\n",
        "",
        "a non-contiguous tensor handed to the compiled entry as if contiguous",
        T_EAGER,
    ),
    _toolkit(
        "eager-int-defaults-made-float",
        EAGER,
        "        if type(args[i]) is int and (i < n or (kwargs and param_names[i] in kwargs)):",
        "        if type(args[i]) is int:",
        "an int default of a float static made a float, where the dispatcher passes it as written",
        T_EAGER,
    ),
    # the memo of an op's last call (issue 40): each thing the key holds, and the entry's life
    _toolkit(
        "eager-memo-ignores-statics",
        EAGER,
        "        if type(v) is not type(value) or v != value:",
        "        if type(v) is not type(value):",
        "the memo serves a call with another float static: x * 2 + y returned for alpha=3",
        T_EAGER,
    ),
    _toolkit(
        "eager-memo-ignores-generation",
        EAGER,
        "            or self._cache.generation != generation\n",
        "",
        "the memo runs an entry cache_clear() dropped (the tuner's new config never applies)",
        T_EAGER,
    ),
    _toolkit(
        "eager-memo-ignores-precision",
        EAGER,
        "            or _precision() != precision_\n",
        "",
        "the memo runs the entry traced at the old matmul precision after the setting changed",
        T_EAGER,
    ),
    _toolkit(
        "eager-memo-ignores-interpret-mode",
        EAGER,
        "            or self._mode() is not mode\n",
        "",
        "the memo runs the fast interpreter's entry inside interpret_mode('tpu')",
        T_EAGER,
    ),
    _toolkit(
        "eager-memo-takes-tensors-needing-grad",
        EAGER,
        "            or (t.requires_grad and grad)\n",
        "",
        "the memo runs a call whose inputs need gradients once grad mode is on: no grad_fn",
        T_EAGER,
    ),
    _toolkit(
        "eager-memo-ignores-conjugate-bit",
        EAGER,
        "            or t.is_conj()\n            or t.is_neg()\n            or (t.requires_grad and grad)\n",
        "            or t.is_neg()\n            or (t.requires_grad and grad)\n",
        "the memo hands a conjugate view's memory to the kernel unconjugated",
        T_EAGER,
    ),
    # a public function's argument check, left out only for the memo's call that passed it
    _toolkit(
        "eager-memo-skips-a-check-it-never-passed",
        EAGER,
        "            if memo is None or checked is None or memo[6] is not checked:",
        "            if memo is None or checked is None:",
        "a Tokamax public function skips its argument check after the op alone ran the call: "
        "arguments it refuses get a result",
        T_EAGER,
    ),
    _toolkit(
        "eager-memo-zero-sign",
        EAGER,
        "        if v == 0.0 and type(v) is float and _copysign(1.0, v) != _copysign(1.0, value):",
        "        if False:",
        "the memo serves alpha=-0.0 the 0.0 executable: x / -0.0 gives +inf",
        T_EAGER,
    ),
    _toolkit(
        "eager-memo-holds-records",
        EAGER,
        "tuple(None if r is None else weakref.ref(r) for r in records)",
        "tuple(None if r is None else (lambda r=r: r) for r in records)",
        "the memo holds the last call's views strongly: a dropped weight's storage stays alive",
        T_EAGER,
    ),
    _toolkit(
        "eager-key-negative-zero-is-zero",
        EAGER,
        "            key.append(NEGATIVE_ZERO)  # static_key's, inline: the hot path",
        "            key.append(v)",
        "alpha=-0.0 after alpha=0.0 runs the 0.0 executable on the shortcut: x / -0.0 gives +inf",
        T_EAGER,
    ),
    _toolkit(
        "static-key-negative-zero-is-zero",
        "tpu_kernels/definition/signature.py",
        "        return NEGATIVE_ZERO if v == 0.0 and math.copysign(1.0, v) < 0 else v",
        "        return v",
        "the executor's key (the dispatcher's path, float lists) shares 0.0's executable with -0.0",
        T_EAGER,
    ),
    _toolkit(
        "eager-any-dispatch-state-plain",
        EAGER,
        "        or (_include().raw_repr(), _exclude().raw_repr()) not in _PLAIN_STATES\n",
        "",
        "the shortcut bypasses the dispatcher under any dispatch-key guard, not only inference mode",
        T_EAGER,
    ),
    _toolkit(
        "fake-cache-without-statics",
        FAKE,
        "            key = (_hashable(statics), _spec_key(tensors))\n"
        "            outs = self.cache.get_or_build(key, lambda: self._concrete",
        "            key = (_spec_key(tensors),)\n            outs = self.cache.get_or_build(key, lambda: self._concrete",
        "fake results keyed on the tensors only: k=2 after k=4 gets k=4's shapes",
        T_FAKE,
    ),
    _toolkit(
        "fake-symbolic-plan-without-statics",
        FAKE,
        'key = ("symbolic", _hashable(statics), sizes.key)',
        'key = ("symbolic", sizes.key)',
        "a symbolic-shape plan reused across statics: under dynamic compile k=3 after k=2 gets k=2's shapes",
        T_FAKE,
    ),
    _toolkit(
        "buckets-pad-broadcast-dims",
        BUCKETS,
        "            if s != n or size == n:",
        "            if size == n:",
        "a size-1 (broadcast) dim padded to the bucket: the kernel sees shapes the op promises it never "
        "does (results stay right: the copy broadcasts the row; the work grows)",
        T_BUCKETS,
        BUCKETS_FAST,
    ),
    _toolkit(
        "buckets-gradients-padded-with-the-pad-value",
        BUCKETS,
        "(d, dataclasses.replace(b, pad=0)) for d, b in dims.items()",
        "(d, b) for d, b in dims.items()",
        "incoming gradients padded with the forward's pad value, not 0: padded rows add to a weight's gradient",
        T_BUCKETS,
        BUCKETS_FAST,
    ),
    _toolkit(
        "buckets-tile-of-the-widest-dtype",
        BUCKETS,
        "itemsize = min(itemsize, t.dtype.itemsize)",
        "itemsize = max(itemsize, t.dtype.itemsize)",
        "the sublane tile of the widest padded dtype: bfloat16 decode steps pad to 8 rows, not 16",
        T_BUCKETS,
        BUCKETS_FAST,
    ),
    _toolkit(
        "buckets-power-of-two-off-by-one",
        BUCKETS,
        "1 << (n - 1).bit_length()",
        "1 << n.bit_length()",
        "a length that is a power of two padded to the next one (8 rows to 16)",
        T_BUCKETS,
        BUCKETS_FAST,
    ),
)
