"""`torch.vmap` over kernel ops: a batching rule per op, derived or declared.

Without a rule torch.vmap falls back to calling the op once per sample (and
warns). Every op gets a rule (`torch.library.register_vmap`) when it is
defined; what the rule does is looked up at call time:

- declared: `@op.def_vmap` gives a torch batching rule,
  `fn(info, in_dims, *args, **kwargs) -> (outputs, out_dims)` (torch's
  `register_vmap` convention), for ops whose body JAX cannot batch or that
  batch better by hand (e.g. folding the batch into rows).
- derived (the default): the op's batched twin, `<ns>::<name>_vmapped`, a
  kernel op whose body is `jax.vmap` of the op's body over the batched tensor
  arguments (batch dim moved to 0; `in_axes=None` for the others). It is made
  on the first batched call and is an ordinary kernel op: its executor's
  cache key holds the batched shapes and which arguments are batched, so each
  batched shape compiles once; its fake is `jax.eval_shape` of the batched
  body; and it has a backward when the op has one (the op's backward, itself
  vmapped), so `grad(vmap(op))` works. `jax.vmap` of a `pallas_call` adds a
  grid axis (interpret mode included), so Pallas kernels batch without a loop.

Outputs come back batched at dim 0. Nothing here depends on a backward op's
schema: the rules are generic over the signature.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import torch

from tpu_kernels.definition.signature import Kind, Param, Signature
from tpu_kernels.errors import KernelError, OpDefinitionError

if TYPE_CHECKING:
    from tpu_kernels.definition.protocol import Op

# The twin's first parameter: one flag per tensor leaf (list elements
# included, absent optionals skipped), True where the leaf is batched. A
# twin's twin (nested vmap) adds another: vmap_batched1_, ...
BATCHED = "vmap_batched"
_LOCK = threading.Lock()


def supported(sig: Signature) -> bool:
    """torch's register_vmap rejects ops with keyword-only tensors."""
    return not any(p.is_tensor and p.keyword_only for p in sig.params)


def register(kop: Op) -> None:
    """Register `kop`'s batching rule with torch (at definition; the rule is chosen per call)."""
    if not supported(kop.signature) or kop.mutates_args:
        return  # such ops keep torch's per-sample fallback
    torch.library.register_vmap(
        kop.name, lambda info, in_dims, *a, **kw: rule(kop, info, in_dims, a, kw), lib=kop.lib
    )


def rule(kop: Op, info: Any, in_dims: tuple, args: tuple, kwargs: dict) -> tuple[Any, Any]:
    """The batching rule: the declared one, else the derived one."""
    if kop.vmap_rule is not None:
        return kop.vmap_rule(info, in_dims, *args, **kwargs)
    return derived_rule(kop, in_dims, args, kwargs)


def derived_rule(kop: Op, in_dims: tuple, args: tuple, kwargs: dict) -> tuple[Any, Any]:
    sig = kop.signature
    values = sig.values(args, kwargs)
    dims = list(in_dims) + [None] * (len(values) - len(in_dims))  # dropped trailing defaults
    flags: list[bool] = []
    moved: list[Any] = []
    for p, v, d in zip(sig.params, values, dims):
        if p.kind is Kind.STATIC or v is None:
            moved.append(v)
        elif p.kind is Kind.TENSOR_LIST:
            ds = d if isinstance(d, (list, tuple)) else [d] * len(v)
            moved.append([_to_front(t, e) for t, e in zip(v, ds)])
            flags.extend(e is not None for e in ds)
        else:
            moved.append(_to_front(v, d))
            flags.append(d is not None)
    twin = batched_op(kop)
    n_pos = sum(not p.keyword_only for p in sig.params)
    kw = {p.name: v for p, v in zip(sig.params, moved) if p.keyword_only}
    try:
        out = twin.overload(flags, *moved[:n_pos], **kw)
    except KernelError as e:
        raise type(e)(  # its kind kept (a bad argument stays a ValueError, ...)
            f"{kop.name}: torch.vmap batches the op with jax.vmap of its kernel body, which "
            f"failed ({e}). Declare a batching rule with @{kop.fn_name}.def_vmap."
        ) from e
    if isinstance(out, list):
        return out, [0] * len(out)
    if isinstance(out, tuple):
        return out, (0,) * len(out)
    return out, 0


def _to_front(t: torch.Tensor, d: int | None) -> torch.Tensor:
    return t if d is None or d == 0 else t.movedim(d, 0)


def batched_op(kop: Op) -> Op:
    """`kop`'s batched twin (made once, on the first batched call)."""
    twin = kop.vmap_twin
    if twin is not None:
        return twin
    with _LOCK:
        if kop.vmap_twin is None:
            kop.vmap_twin = _make_twin(kop)
    return kop.vmap_twin


def _make_twin(kop: Op) -> Op:
    fwd = kop.signature
    depth = sum(p.name.startswith(BATCHED) for p in fwd.params)
    flag_name = f"{BATCHED}{depth or ''}_"
    if any(p.name == flag_name for p in fwd.params):
        raise OpDefinitionError(f"{kop.name}: parameter name {flag_name!r} is reserved for torch.vmap.")
    qualname = f"{kop.name}_vmapped"
    flag = Param(flag_name, Kind.STATIC, "bool[]", inspect.Parameter.empty, keyword_only=False)
    sig = Signature(qualname, (flag,) + fwd.params, fwd.n_outputs, fwd.returns_tuple)
    n_res = kop.signature.n_outputs - kop.n_visible
    twin = type(kop)(  # an op of the op's own class: this module never names op.py's
        qualname,
        batched_kernel(fwd, kop.fn, flag_name),
        signature=sig,
        returns_list=kop.returns_list,
        outputs=kop.output_names if n_res else None,
        residuals=kop.output_names[kop.n_visible :],
        cache_size=kop.cache_size,
    )
    if kop.backward_impl is not None:
        twin.backward_impl = BatchedBackward(kop)
    return twin


def batched_kernel(fwd: Signature, body: Callable, flag_name: str = f"{BATCHED}_") -> Callable:
    """`body` under `jax.vmap`: batched tensor leaves at axis 0, the others shared."""
    tensor_names = [p.name for p in fwd.tensor_params]

    def kernel(**kwargs: Any) -> Any:
        flags = kwargs.pop(flag_name)
        tensors = [kwargs.pop(n) for n in tensor_names]
        statics = kwargs
        leaves, treedef = jax.tree_util.tree_flatten(tensors)
        if len(leaves) != len(flags):
            raise ValueError(f"{fwd.op}: {len(flags)} batch flags for {len(leaves)} tensors.")

        def per_sample(*xs: Any) -> Any:
            return body(**statics, **dict(zip(tensor_names, jax.tree_util.tree_unflatten(treedef, list(xs)))))

        in_axes = tuple(0 if f else None for f in flags)
        out = jax.vmap(per_sample, in_axes=in_axes, out_axes=0)(*leaves)
        return list(out) if isinstance(out, list) else out

    return kernel


class BatchedBackward:
    """The twin's backward: the op's own backward under torch.vmap (so its
    backward ops use their batching rules too); gradients of shared
    (unbatched) inputs are summed over the batch."""

    def __init__(self, kop: Op) -> None:
        self.kop = kop

    def __call__(self, values: list[Any], outs: list[Any], grads: list[Any]) -> list[Any]:
        flags, fvals = list(values[0]), values[1:]
        dims: list[Any] = []
        it = iter(flags)
        for p, v in zip(self.kop.signature.params, fvals):
            if p.kind is Kind.STATIC or v is None:
                dims.append(None)
            elif p.kind is Kind.TENSOR_LIST:
                dims.append([0 if next(it) else None for _ in v])
            else:
                dims.append(0 if next(it) else None)
        layout: list[Any] = []

        def per_sample(vals: list[Any], o: list[Any], g: list[Any]) -> tuple:
            result = self.kop.backward_impl(vals, o, g)
            # None (no gradient), True (one tensor), or a list's mask of present gradients
            layout[:] = [
                None if r is None else ([t is not None for t in r] if isinstance(r, list) else True)
                for r in result
            ]
            flat: list[torch.Tensor] = []
            for r in result:
                if isinstance(r, list):
                    flat.extend(t for t in r if t is not None)
                elif r is not None:
                    flat.append(r)
            return tuple(flat)

        flat = torch.vmap(per_sample, in_dims=(dims, [0] * len(outs), [0] * len(grads)))(
            list(fvals), list(outs), list(grads)
        )
        out: list[Any] = [None]  # the flags get no gradient
        k = 0
        for entry, d in zip(layout, dims):
            if entry is None:
                out.append(None)
            elif entry is True:
                out.append(_unbatch(flat[k], d))
                k += 1
            else:
                grads_list: list[Any] = []
                for present, e in zip(entry, d):
                    grads_list.append(_unbatch(flat[k], e) if present else None)
                    k += present
                out.append(grads_list)
        return out


def _unbatch(g: torch.Tensor, d: int | None) -> torch.Tensor:
    """A per-sample gradient of a batched input stays; a shared input's is summed."""
    return g if d == 0 else g.sum(0)


__all__ = ["batched_op", "register", "rule"]
