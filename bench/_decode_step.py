"""Where one decode step of a patched HF model goes: its tpu_kernels op calls (recorded with a
dispatch mode), the rows and key/value positions each computes, and, per swapped module kind,
the time of HF's forward, of the tpu_kernels forward and of the op's own JAX function called
directly on JAX arrays (the floor of a call through the torch <-> JAX crossing); and the CPU
time of the process's threads over many decode steps (the main thread's against JAX's worker
threads', which asynchronous CPU dispatch would keep busy).

Used by bench/generate.py (`--breakdown`) in its child process; imports torch and JAX.
"""

from __future__ import annotations

import os
import statistics
import threading
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


def _jitted(call: OpCall) -> tuple[Callable[[dict], Any], dict[str, torch.Tensor]]:
    """The op's JAX function jitted with the call's statics, taking its tensors by name; and
    the call's tensors."""
    from tpu_kernels import registered_ops

    kop = registered_ops()[call.op]
    values = kop.signature.values(call.args, call.kwargs)
    names = [p.name for p in kop.signature.params]
    tensors = {n: v for n, v in zip(names, values) if isinstance(v, torch.Tensor)}
    statics = {n: v for n, v in zip(names, values) if not isinstance(v, torch.Tensor) and n not in tensors}
    statics = {p.name: statics[p.name] for p in kop.signature.static_params}
    absent = {n: None for n in names if n not in tensors and n not in statics}  # optional tensors
    return jax.jit(lambda arrays: kop.fn(**arrays, **statics, **absent)), tensors


def direct_jax(call: OpCall) -> Callable[[], Any]:
    """The op's JAX function, jitted, on JAX arrays of the call's tensors: what the call costs
    without tpu_kernels' layers (blocking on the result, as a torch call's result is ready)."""
    from tpu_kernels.runtime.bridge import to_jax_cpu

    jitted, tensors = _jitted(call)
    arrays = {n: to_jax_cpu(t.contiguous()) for n, t in tensors.items()}
    # an array's own wait is JAX's fastest (jax.block_until_ready walks a pytree first)
    if isinstance(jitted(arrays), jax.Array):
        return lambda: jitted(arrays).block_until_ready()

    def waited() -> Any:
        out = jitted(arrays)
        for leaf in jax.tree_util.tree_leaves(out):
            leaf.block_until_ready()
        return out

    return waited


def bare_crossing(call: OpCall) -> Callable[[], Any]:
    """The call's crossing and nothing else: a view of each tensor (bridge.host_view, as
    tpu_kernels views a fresh activation), the op's jitted JAX function, the results
    exported to torch (bridge.to_torch_cpu, which waits for them)."""
    from tpu_kernels.runtime.bridge import host_view, to_torch_cpu

    jitted, tensors = _jitted(call)
    tensors = {n: t.contiguous() for n, t in tensors.items()}

    def crossing() -> list[torch.Tensor]:
        out = jitted({n: host_view(t) for n, t in tensors.items()})
        return [to_torch_cpu(a) for a in jax.tree_util.tree_leaves(out)]

    crossing()
    return crossing


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


class Clocks:
    """Wall time inside named groups of callables, each wrapped where the step looks it up (an
    instance or module attribute, a mapping entry) and restored on exit. A clock counts only
    its outermost call (a wrapped callable that calls another of its group is timed once);
    clocks of different names nest (an op call's time includes its crossing's). The clock's
    own cost is about 0.1-0.3 us a call."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._depth: dict[str, int] = {}
        self._restore: list[Callable[[], None]] = []

    def reset(self) -> None:
        for counts in (self.seconds, self.calls):
            for k in counts:
                counts[k] = 0

    def timer(self, name: str, fn: Callable) -> Callable:
        """`fn`, timed under `name`."""
        self.seconds.setdefault(name, 0.0)
        self.calls.setdefault(name, 0)
        self._depth.setdefault(name, 0)
        clock, depth, seconds, calls = time.perf_counter, self._depth, self.seconds, self.calls

        def timed(*args: Any, **kwargs: Any) -> Any:
            if depth[name]:
                return fn(*args, **kwargs)
            depth[name] = 1
            t = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[name] += clock() - t
                calls[name] += 1
                depth[name] = 0

        return timed

    def attr(self, obj: Any, attr: str, name: str, wrap: Callable | None = None) -> None:
        """Time `obj.attr` (an attribute the caller looks up at each call) under `name`;
        `wrap(timed)`, if given, is installed instead of the timed callable."""
        own = vars(obj)
        had, saved = attr in own, own.get(attr)
        timed = self.timer(name, getattr(obj, attr))
        setattr(obj, attr, wrap(timed) if wrap else timed)
        self._restore.append(lambda: setattr(obj, attr, saved) if had else delattr(obj, attr))

    def item(self, mapping: Any, key: str, name: str, wrap: Callable | None = None) -> None:
        saved = mapping[key]
        timed = self.timer(name, saved)
        mapping[key] = wrap(timed) if wrap else timed
        self._restore.append(lambda: mapping.__setitem__(key, saved))

    def __enter__(self) -> Clocks:
        return self

    def __exit__(self, *exc: Any) -> None:
        while self._restore:
            self._restore.pop()()


def time_swapped_calls(
    model: torch.nn.Module, clocks: Clocks, name: str = "swapped", wrap: Callable | None = None
) -> None:
    """Time, under `name`, the modules and the attention function that apply_tpu_kernels swaps
    (the RMSNorms, the gated MLPs, the attention function of `attn_implementation`), in an
    unpatched model (HF's versions) or a patched one (tpu_kernels'); `wrap` as `Clocks.attr`'s."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from tpu_kernels.integrations.transformers.families import family_of_config

    norm_cls, mlp_cls, _ = family_of_config(model.config).classes()
    for m in model.modules():
        if isinstance(m, (norm_cls, mlp_cls)):
            clocks.attr(m, "forward", name, wrap)
    clocks.item(ALL_ATTENTION_FUNCTIONS, model.config._attn_implementation, name, wrap)


def _per_step(
    model: torch.nn.Module,
    clocks: Clocks,
    rounds: int,
    steps: int,
    variants: dict[str, Callable[[], None]] | None = None,
) -> list[dict[str, float]]:
    """Per round: us per decode step of the whole step ("step") and of each clock, and each
    clock's calls per step ("<clock> calls"). `variants`: name -> a setter run before that
    variant's steps; each round measures every variant in turn, its keys prefixed
    "<name> " (interleaved, since this machine's speed drifts within minutes)."""
    token, cache, length = decode_step_inputs(model)
    position = torch.tensor([[length - 1]])
    variants = variants or {"": lambda: None}
    out = []
    with torch.no_grad():
        for setup in variants.values():  # warm: every executable compiled
            setup()
            model(token, cache=cache, position_ids=position)
            cache.crop(-1)
        for _ in range(rounds):
            r: dict[str, float] = {}
            for name, setup in variants.items():
                setup()
                clocks.reset()
                t = time.perf_counter()
                for _ in range(steps):
                    model(token, cache=cache, position_ids=position)
                    cache.crop(-1)
                seconds = time.perf_counter() - t
                prefix = f"{name} " if name else ""
                r[f"{prefix}step"] = seconds / steps * 1e6
                r.update({f"{prefix}{k}": v / steps * 1e6 for k, v in clocks.seconds.items()})
                r.update({f"{prefix}{k} calls": v / steps for k, v in clocks.calls.items()})
            out.append(r)
    return out


def hf_swapped_us(model: torch.nn.Module, rounds: int = 9, steps: int = 20) -> float:
    """Median us per decode step that an unpatched `model` spends in the calls apply_tpu_kernels
    would swap (HF's norms, MLPs and attention function): subtracted from its step, it leaves
    what a patched step keeps of HF's own work."""
    with Clocks() as clocks:
        time_swapped_calls(model, clocks)
        rounds_ = _per_step(model, clocks, rounds, steps)
    return statistics.median(r["swapped"] for r in rounds_)


def bare_crossings_us(
    model: torch.nn.Module, calls: list[OpCall], rounds: int = 9, steps: int = 20
) -> dict[str, float]:
    """An unpatched `model`'s decode step with, after each call apply_tpu_kernels would swap,
    the bare crossing (`bare_crossing`) of the tpu_kernels call that takes its place (`calls`,
    recorded from the patched model's step, in the step's order): the crossing timed among a
    real step's work, without tpu_kernels' layers. In interleaved rounds, with the crossings
    ("with ...") and without ("without ..."); medians, us per step: "step", "swapped" (HF's
    own swapped calls) and "crossing", and "crossing calls" per step. "with step" minus "with
    swapped" is the step with each swapped call replaced by its crossing - nearly: HF's calls
    still run beside the crossings, so what they do to the caches stays in (the floor errs
    high by that); "without step" is sdpa's step in the same rounds."""
    crossings = [bare_crossing(c) for c in calls]
    state = {"next": 0, "on": True}

    def next_crossing() -> None:
        i = state["next"]
        state["next"] = (i + 1) % len(crossings)
        crossings[i]()

    with Clocks() as clocks:
        cross = clocks.timer("crossing", next_crossing)

        def then_cross(timed: Callable) -> Callable:
            def call(*args: Any, **kwargs: Any) -> Any:
                out = timed(*args, **kwargs)
                if state["on"]:
                    cross()
                return out

            return call

        time_swapped_calls(model, clocks, wrap=then_cross)
        # every forward (generate()'s, the warm-up, each step) makes the swapped calls in the
        # recorded order, so the cycle stays in step; "with crossing calls" per step shows it
        variants = {"with": lambda: state.update(on=True), "without": lambda: state.update(on=False)}
        rounds_ = _per_step(model, clocks, rounds, steps, variants)
    return {k: statistics.median(r[k] for r in rounds_) for k in rounds_[0]}


def in_model_split_us(
    model: torch.nn.Module, ops: list[str], rounds: int = 9, steps: int = 20
) -> dict[str, float]:
    """Where a patched model's decode step goes, timed inside the step (medians over rounds, us
    per step): "step", "swapped" (the patched norms, MLPs and attention function), "ops" (the
    tpu_kernels.tokamax functions they call), "views" (the arguments' JAX views) and "call"
    (the JAX call and the result's export to torch) of `ops`' calls - the crossing, as it
    costs among the step's other work rather than in a loop of its own; and "call calls",
    the JAX calls per step."""
    from tpu_kernels import registered_ops, tokamax
    from tpu_kernels.integrations.transformers import attention, layers

    with Clocks() as clocks:
        time_swapped_calls(model, clocks)
        # the public functions as the patched forwards call them: the modules' functions of the
        # same names, which import Tokamax's at their first call
        for module in (layers, attention):
            for n, v in list(vars(module).items()):
                if n in tokamax.__all__ and callable(v):
                    clocks.attr(module, n, "ops")
        for name in dict.fromkeys(ops):
            shortcut = registered_ops()[name]._eager_cpu
            executor = shortcut.executor
            # the shortcut's bound views and run, and the executor's own (its full path); a
            # cached tensor's view the shortcut reads off its view-cache record with its checks
            # (dispatch/eager.py), so "views" holds the imports of tensors seen anew only
            for obj in (shortcut, executor):
                clocks.attr(obj, "_to_jax", "views")
            clocks.attr(shortcut, "_run", "call")
            clocks.attr(executor, "run", "call")
        rounds_ = _per_step(model, clocks, rounds, steps)
    return {k: statistics.median(r[k] for r in rounds_) for k in rounds_[0]}


def thread_cpu_s(task_dir: str = "/proc/self/task") -> dict[int, tuple[str, float]]:
    """thread id -> (its name, its CPU seconds so far: user + system), for every thread of this
    process, from Linux's /proc (empty where there is none). JAX's CPU worker threads are
    named `tf_XLAExecute` (XLA's)."""
    threads: dict[int, tuple[str, float]] = {}
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return threads
    tick = os.sysconf("SC_CLK_TCK")
    for tid in tids:
        try:
            with open(os.path.join(task_dir, tid, "stat")) as f:
                threads[int(tid)] = parse_task_stat(f.read(), tick)
        except OSError:  # the thread ended meanwhile
            continue
    return threads


def parse_task_stat(stat: str, tick: int) -> tuple[str, float]:
    """(thread name, CPU seconds) from a /proc/<pid>/task/<tid>/stat line: the name is the
    text between the first "(" and the last ")" (it may hold spaces and parentheses); utime and
    stime are the 12th and 13th fields after it, in clock ticks (`tick` a second)."""
    close = stat.rindex(")")
    fields = stat[close + 2 :].split()
    return stat[stat.index("(") + 1 : close], (int(fields[11]) + int(fields[12])) / tick


def cpu_shares(
    main_s: float,
    process_s: float,
    before: dict[int, tuple[str, float]],
    after: dict[int, tuple[str, float]],
    main_tid: int,
) -> dict:
    """Where the CPU went while the main thread ran: its CPU seconds and the process's
    (`time.thread_time` and `time.process_time` deltas), every other thread's together and
    their share of the process, and per other thread name (`thread_cpu_s` before and after; a
    thread started meanwhile counts from 0) the CPU seconds its threads took."""
    others = max(process_s - main_s, 0.0)
    by_name: dict[str, float] = {}
    for tid, (name, seconds) in after.items():
        spent = seconds - before.get(tid, (name, 0.0))[1]
        if tid != main_tid and spent > 0:
            by_name[name] = by_name.get(name, 0.0) + spent
    return {
        "main_s": main_s,
        "process_s": process_s,
        "other_threads_s": others,
        "other_share": others / process_s if process_s > 0 else 0.0,
        "other_threads_by_name_s": by_name,
    }


def decode_steps_cpu(model: torch.nn.Module, steps: int = 300) -> dict:
    """`cpu_shares` over `steps` decode steps of `model` (after one to warm it), with their wall
    seconds ("wall_s") and the number of steps."""
    token, cache, length = decode_step_inputs(model)
    position = torch.tensor([[length - 1]])
    with torch.no_grad():
        model(token, cache=cache, position_ids=position)
        cache.crop(-1)
        before = thread_cpu_s()
        main, process, wall = time.thread_time(), time.process_time(), time.perf_counter()
        for _ in range(steps):
            model(token, cache=cache, position_ids=position)
            cache.crop(-1)
        main, process = time.thread_time() - main, time.process_time() - process
        wall = time.perf_counter() - wall
        after = thread_cpu_s()
    shares = cpu_shares(main, process, before, after, threading.get_native_id())
    return {**shares, "wall_s": wall, "steps": steps}


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
    "Clocks",
    "OpCall",
    "bare_crossing",
    "bare_crossings_us",
    "cpu_shares",
    "decode_step_inputs",
    "decode_step_us",
    "decode_steps_cpu",
    "direct_jax",
    "hf_swapped_us",
    "in_model_split_us",
    "op_calls_us",
    "parse_task_stat",
    "record_decode_step",
    "thread_cpu_s",
]
