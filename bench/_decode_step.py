"""Where one decode step of a patched HF model goes: its tpu_kernels op calls (recorded with a
dispatch mode), the rows and key/value positions each computes, and, per swapped module kind,
the time of HF's forward, of the tpu_kernels forward and of the op's own JAX function called
directly on JAX arrays (the floor of a call through the torch <-> JAX crossing).

Used by bench/generate.py (`--breakdown`) in its child process; imports torch and JAX.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import torch
from torch.utils._python_dispatch import TorchDispatchMode


@dataclass
class OpCall:
    op: str  # "tokamax::layer_norm"
    args: tuple
    kwargs: dict

    def rows(self) -> tuple[str, int]:
        """(what, how many): token rows of a norm or GLU call, key/value positions of attention."""
        if self.op == "tokamax::dot_product_attention":
            return "kv positions", int(self.args[1].shape[-3])  # Tokamax's [batch, seq, heads, dim]
        x = self.args[0]
        return "rows", x.numel() // x.shape[-1]


class _Record(TorchDispatchMode):
    """Records every tpu_kernels / Tokamax op call (the kernels run as usual)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[OpCall] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if name.split("::")[0] in ("tokamax", "tpu_kernels") and not name.endswith("_backward"):
            self.calls.append(OpCall(name, args, kwargs))
        return func(*args, **kwargs)


def decode_step_inputs(model: torch.nn.Module, prompt_len: int = 8, new_tokens: int = 4):
    """A prompt's cache after `new_tokens` greedy tokens, and the next token: one decode step's inputs."""
    ids = torch.randint(3, 128, (1, prompt_len), generator=torch.Generator().manual_seed(prompt_len))
    with torch.no_grad():
        out = model.generate(
            ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
            pad_token_id=0, return_dict_in_generate=True,
        )  # fmt: skip
    return out.sequences[:, -1:], out.past_key_values, out.sequences.shape[1]


def record_decode_step(model: torch.nn.Module) -> list[OpCall]:
    """The op calls of one decode step (batch 1)."""
    import copy

    token, cache, length = decode_step_inputs(model)
    rec = _Record()
    with torch.no_grad(), rec:
        model(token, cache=copy.deepcopy(cache), position_ids=torch.tensor([[length - 1]]))
    return rec.calls


def _per_call_us(fn: Callable[[], Any], calls: int = 200, rounds: int = 7) -> float:
    for _ in range(20):
        fn()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(times)


def direct_jax(call: OpCall) -> Callable[[], Any]:
    """The op's JAX function, jitted, on JAX arrays of the call's tensors: what the call costs
    without tpu_kernels' layers (blocking on the result, as a torch call's result is ready)."""
    from tpu_kernels import registered_ops
    from tpu_kernels.bridge import to_jax_cpu

    kop = registered_ops()[call.op]
    values = kop.signature.values(call.args, call.kwargs)
    names = [p.name for p in kop.signature.params]
    tensors = {n: v for n, v in zip(names, values) if isinstance(v, torch.Tensor)}
    statics = {n: v for n, v in zip(names, values) if not isinstance(v, torch.Tensor) and n not in tensors}
    statics = {p.name: statics[p.name] for p in kop.signature.static_params}
    absent = {n: None for n in names if n not in tensors and n not in statics}  # optional tensors
    jitted = jax.jit(lambda arrays: kop.fn(**arrays, **statics, **absent))
    arrays = {n: to_jax_cpu(t.contiguous()) for n, t in tensors.items()}
    jitted(arrays).block_until_ready()
    return lambda: jitted(arrays).block_until_ready()


def through_tpu_kernels(call: OpCall) -> Callable[[], Any]:
    """The recorded call again, as the model made it (under no_grad, as a decode step runs:
    the GLU's weights are Parameters, and with grad enabled each replay also recorded the
    backward's graph): the op through torch's dispatcher."""
    ns, name = call.op.split("::")
    op = getattr(getattr(torch.ops, ns), name)

    def replay():
        with torch.no_grad():
            return op(*call.args, **call.kwargs)

    return replay


def decode_step_us(models: dict[str, torch.nn.Module], rounds: int = 9, steps: int = 20) -> dict[str, float]:
    """Median time of one decode step (a forward of one new token on a 12-position cache),
    per model, measured in interleaved rounds (this machine's speed drifts within minutes)."""
    inputs = {name: decode_step_inputs(m) for name, m in models.items()}
    times: dict[str, list[float]] = {name: [] for name in models}

    def step(name: str) -> None:
        token, cache, length = inputs[name]
        models[name](token, cache=cache, position_ids=torch.tensor([[length - 1]]))
        cache.crop(-1)  # drop the new position: the same step again next time

    with torch.no_grad():
        for name in models:
            step(name)
        for _ in range(rounds):
            for name in models:
                t = time.perf_counter()
                for _ in range(steps):
                    step(name)
                times[name].append((time.perf_counter() - t) / steps * 1e6)
    return {name: statistics.median(ts) for name, ts in times.items()}


class _SwappedTime:
    """Wall time spent inside the modules and the attention function that apply_tpu_kernels
    swaps (the RMSNorms, the gated MLPs, HF's attention function of `attn_implementation`),
    while installed on an unpatched model: what HF's own versions of the swapped calls cost
    in its decode step. Each is wrapped on the instance (or the interface entry) and
    restored on exit; the clock's own cost is about 0.1 us a call."""

    def __init__(self, model: torch.nn.Module) -> None:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        from tpu_kernels.integrations.transformers.families import family_of_config

        norm_cls, mlp_cls, _ = family_of_config(model.config).classes()
        self.modules = [m for m in model.modules() if isinstance(m, (norm_cls, mlp_cls))]
        self.interface, self.attn = ALL_ATTENTION_FUNCTIONS, model.config._attn_implementation
        self.seconds = 0.0
        self.calls = 0

    def _timed(self, fn: Callable) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t
                self.calls += 1

        return timed

    def __enter__(self) -> _SwappedTime:
        for m in self.modules:
            m.forward = self._timed(m.forward)
        self.saved = self.interface[self.attn]
        self.interface[self.attn] = self._timed(self.saved)
        return self

    def __exit__(self, *exc: Any) -> None:
        for m in self.modules:
            del m.forward  # the class's forward again
        self.interface[self.attn] = self.saved


def hf_swapped_us(model: torch.nn.Module, rounds: int = 9, steps: int = 20) -> float:
    """Median us per decode step that an unpatched `model` spends in the calls apply_tpu_kernels
    would swap (HF's norms, MLPs and attention function): subtracted from its step, it leaves
    what a patched step keeps of HF's own work."""
    token, cache, length = decode_step_inputs(model)
    per_step = []
    with torch.no_grad(), _SwappedTime(model) as clock:
        for _ in range(rounds):
            clock.seconds = 0.0
            for _ in range(steps):
                model(token, cache=cache, position_ids=torch.tensor([[length - 1]]))
                cache.crop(-1)
            per_step.append(clock.seconds / steps * 1e6)
    return statistics.median(per_step)


def op_calls_us(calls: list[OpCall]) -> list[dict]:
    """Per recorded call: the op, its rows, us through tpu_kernels and us of its JAX function."""
    out = []
    for call in calls:
        what, n = call.rows()
        out.append({
            "op": call.op, what.replace(" ", "_"): n,
            "tpu_kernels_us": _per_call_us(through_tpu_kernels(call)),
            "jax_us": _per_call_us(direct_jax(call)),
        })  # fmt: skip
    return out


__all__ = [
    "OpCall",
    "decode_step_inputs",
    "decode_step_us",
    "direct_jax",
    "hf_swapped_us",
    "op_calls_us",
    "record_decode_step",
]
