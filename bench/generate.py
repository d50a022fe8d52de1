"""Generation: a tiny Llama's greedy generate() with HF's sdpa and with tpu_kernels, with and without buckets.

For each attention path, in a fresh process with an empty on-disk kernel cache:

  first      the first generate() (8-token prompt, 16 new tokens): seconds and attention
             compiles (misses of torch.ops.tokamax.dot_product_attention's compile cache),
             and in brackets the compiles of all three swapped ops (attention, norm, GLU)
  new len    then a first generate() from a 13-token prompt: seconds and compiles it added
  steady     tokens per second of a repeated generate() (median of --repeat runs)

Paths: "sdpa" (HF's own, no tpu_kernels), "tpu_kernels" (apply_tpu_kernels: attention padded
to key/value buckets), "unpadded" (apply_tpu_kernels(buckets=False): one compile per length).
The model is random (LlamaConfig: hidden 64, 2 layers, vocab 128); nothing is downloaded.

    python bench/generate.py [--repeat N] [--new-tokens N] [--threads N] [--json PATH]
    python bench/generate.py --breakdown [--threads N] [--json PATH]

--breakdown (one fresh process) shows where a decode step goes instead:

  rows       the token rows each swapped norm and MLP call computes in one decode step
             (batch 1: one true row), and the key/value positions of each attention call,
             under the row schedules: exact (buckets=False), multiple_of(128) (the shipped
             kernels' row buckets before issue 24), powers_of_two(128) (a row pads to 8),
             and the integration's: powers_of_two(128) with one row as is
  per call   each op call of the step again, through tpu_kernels, and its own JAX function
             jitted and called directly on JAX arrays: the floor of a call that crosses
             from torch to JAX; and what the call adds in the model (a model with only
             that kind swapped, against sdpa's step)
  per token  one decode step (a forward of one new token) of HF's sdpa model, of the
             tpu_kernels model, and of models with one kind of module swapped, in
             interleaved rounds; the goal (issue 24) is tpu_kernels at least 0.8x sdpa's
             tokens/s, and the floor (sdpa's step without HF's own versions of the swapped
             calls, plus each swapped call at its JAX function's cost) says whether the
             crossing alone forbids it: once with the JAX functions timed in loops of
             their own, once with the crossing as it costs inside the tpu_kernels step
  split      the tpu_kernels step timed inside itself: HF's own work, the patched
             modules' torch work around the op calls, tpu_kernels' layers (checks, key,
             lookup), and the crossing (the arguments' JAX views, the JAX call and the
             result's export)
  threads    the CPU time of 300 decode steps of HF's sdpa model and of the tpu_kernels
             model, per thread: the main thread's, and every other thread's (JAX's CPU
             workers, `tf_XLAExecute`, busy only when JAX dispatches asynchronously) with
             their share of the process's CPU

Figures are printed, not asserted; on a CPU machine the tpu_kernels paths pay per-call
overhead (torch <-> JAX) that the tiny model cannot hide, so read the compiles and the
first-call times, not the steady-state ratio, as what carries over to a TPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _child import finish, run_child

PATHS = ("sdpa", "tpu_kernels", "unpadded")


def tiny_llama(threads: int):
    """The benchmark's model: a random LlamaConfig (hidden 64, 2 layers, vocab 128) with HF's sdpa."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    # torch's intra-op thread pool on this shared 2-core machine made each tiny nn.Linear take
    # ~2 ms (HF's sdpa generate(): 1.3-2.0 s with the default threads, 0.065 s with one).
    torch.set_num_threads(threads)
    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128, max_position_embeddings=256,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    model.set_attn_implementation("sdpa")
    return model


def child(path: str, new_tokens: int, repeat: int, threads: int) -> dict:
    import torch

    from tpu_kernels.tokamax.attention.op import dot_product_attention_op as op
    from tpu_kernels.tokamax.glu.op import gated_linear_unit_op
    from tpu_kernels.tokamax.normalization.op import layer_norm_op

    ops = (op, gated_linear_unit_op, layer_norm_op)
    model = tiny_llama(threads)
    if path != "sdpa":
        from tpu_kernels.integrations.transformers import apply_tpu_kernels

        apply_tpu_kernels(model, buckets=path == "tpu_kernels")
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)

    def generate(prompt_len: int) -> tuple[float, int]:
        x = torch.randint(3, 128, (1, prompt_len), generator=torch.Generator().manual_seed(prompt_len))
        misses = [o.cache_info().misses for o in ops]
        t = time.perf_counter()
        with torch.no_grad():
            out = model.generate(x, **kw)
        assert out.shape[1] == prompt_len + new_tokens
        added = [o.cache_info().misses - m for o, m in zip(ops, misses)]
        return time.perf_counter() - t, added[0], sum(added)

    first, first_compiles, first_all = generate(8)
    new_len, new_len_compiles, new_len_all = generate(13)
    steady = statistics.median(generate(8)[0] for _ in range(repeat))
    return {
        "first_s": first,
        "first_compiles": first_compiles,
        "first_compiles_all_ops": first_all,
        "new_len_s": new_len,
        "new_len_compiles": new_len_compiles,
        "new_len_compiles_all_ops": new_len_all,
        "tokens_per_s": new_tokens / steady,
    }


def schedules() -> dict[str, tuple]:
    """Row schedules for the norms' and MLPs' token rows: name -> (apply_tpu_kernels'
    buckets=, tpu_kernels.integrations.transformers.layers.ROWS, layers.ONE_ROW_AS_IS); the
    last is the integration's own. (A function: tpu_kernels is imported in the children.)"""
    from tpu_kernels.dispatch.buckets import multiple_of, powers_of_two

    return {
        "exact": (False, powers_of_two(128), False),
        "multiple_of(128)": (True, multiple_of(128), False),
        "powers_of_two(128)": (True, powers_of_two(128), False),
        "powers_of_two(128), one row as is": (True, powers_of_two(128), True),
    }


ONLY = {  # op -> the model with only its kind of module swapped
    "tokamax::layer_norm": "norms only",
    "tokamax::gated_linear_unit": "MLPs only",
    "tokamax::dot_product_attention": "attention only",
}
SWAPS = {  # apply_tpu_kernels arguments: everything, or one kind of module
    "tpu_kernels": {},
    "norms only": dict(attention=False, mlp=False),
    "MLPs only": dict(attention=False, rms_norm=False),
    "attention only": dict(rms_norm=False, mlp=False),
}


def breakdown(threads: int) -> dict:
    """Rows per decode step under each row schedule, per-call times against the ops' JAX
    functions, and decode-step times (see the module docstring)."""
    import copy

    import _decode_step as step

    from tpu_kernels.integrations.transformers import apply_tpu_kernels

    base = tiny_llama(threads)
    rows = rows_per_decode_step(base)
    models = {"sdpa": base}
    for name, kwargs in SWAPS.items():
        models[name] = copy.deepcopy(base)
        apply_tpu_kernels(models[name], **kwargs)
    calls = step.record_decode_step(models["tpu_kernels"])
    return {
        "rows": rows,
        "calls": step.op_calls_us(calls),
        "step_us": step.decode_step_us(models),
        "hf_swapped_us": step.hf_swapped_us(base),
        "bare_us": step.bare_crossings_us(base, calls),
        "split_us": step.in_model_split_us(models["tpu_kernels"], [c.op for c in calls]),
        "cpu": {name: step.decode_steps_cpu(models[name]) for name in ("sdpa", "tpu_kernels")},
    }


def rows_per_decode_step(base) -> dict[str, list]:
    """Schedule -> [(op, "rows" or "kv positions", n)] of one decode step of `base` patched."""
    import copy

    import _decode_step as step

    from tpu_kernels.integrations.transformers import apply_tpu_kernels, layers

    rows = {}
    for schedule, (buckets, schedule_rows, one_row_as_is) in schedules().items():
        model = copy.deepcopy(base)
        apply_tpu_kernels(model, buckets=buckets)
        saved = layers.ROWS, layers.ONE_ROW_AS_IS
        layers.ROWS, layers.ONE_ROW_AS_IS = schedule_rows, one_row_as_is
        try:
            calls = step.record_decode_step(model)
        finally:
            layers.ROWS, layers.ONE_ROW_AS_IS = saved
        rows[schedule] = [(c.op, *c.rows()) for c in calls]
    return rows


def breakdown_report(r: dict) -> list[str]:
    lines = ["rows per decode step (batch 1: one true token row; attention: the key/value positions)", ""]
    lines += ["| schedule | norm calls: rows each | MLP calls: rows each | rows per step | attention calls: kv positions |",
              "|---|---|---|---|---|"]  # fmt: skip
    for schedule, calls in r["rows"].items():
        norm = [n for op, _, n in calls if op == "tokamax::layer_norm"]
        mlp = [n for op, _, n in calls if op == "tokamax::gated_linear_unit"]
        attn = [n for op, _, n in calls if op == "tokamax::dot_product_attention"]
        lines.append(
            f"| {schedule} | {len(norm)}: {_same(norm)} | {len(mlp)}: {_same(mlp)} | {sum(norm) + sum(mlp)} "
            f"| {len(attn)}: {_same(attn)} |"
        )
    by_op: dict[str, list[dict]] = {}
    for c in r["calls"]:
        by_op.setdefault(c["op"], []).append(c)
    us = r["step_us"]
    sdpa, tk_step = us["sdpa"], us["tpu_kernels"]
    lines += ["", "one decode step's op calls (medians, us per call; in the model: the step with only this "
              "kind swapped minus sdpa's step, per call)", "",
              "| op | calls per step | in the model | replayed through tpu_kernels | its JAX function, directly |",
              "|---|---|---|---|---|"]  # fmt: skip
    total_jax = 0.0
    for op, cs in by_op.items():
        tk = statistics.median(c["tpu_kernels_us"] for c in cs)
        jx = statistics.median(c["jax_us"] for c in cs)
        total_jax += jx * len(cs)
        alone = us.get(ONLY.get(op, ""))
        in_model = f"{(alone - sdpa) / len(cs):+.0f}" if alone is not None else "-"
        lines.append(f"| {op} | {len(cs)} | {in_model} | {tk:.0f} | {jx:.0f} |")
    # The crossing's floor: sdpa's step without HF's own norms, MLPs and attention (timed
    # inside an unpatched model's step), plus every swapped call at its JAX function's cost:
    # the step if tpu_kernels' layers and the patched modules around the op calls cost nothing
    hf = r["hf_swapped_us"]
    floor = sdpa - hf + total_jax
    lines += ["", "one decode step (medians of interleaved rounds)", "",
              "| model | us per step | tokens/s (steps only) | vs sdpa |", "|---|---|---|---|"]  # fmt: skip
    for name, t in us.items():
        lines.append(f"| {name} | {t:.0f} | {1e6 / t:.0f} | {sdpa / t:.2f}x |")
    lines.append(
        f"| the crossing's floor: sdpa's step, minus HF's swapped calls ({hf:.0f} us), plus each swapped call "
        f"at its JAX function's cost ({total_jax:.0f} us) | {floor:.0f} | {1e6 / floor:.0f} | {sdpa / floor:.2f}x |"
    )
    bare, split = r["bare_us"], r["split_us"]
    # in interleaved rounds of its own: sdpa's step with the crossings added and without them
    in_step, sdpa_there = bare["with step"] - bare["with swapped"], bare["without step"]
    in_step_ratio = sdpa_there / in_step
    lines.append(
        f"| the crossing's floor inside a step: sdpa's step with each swapped call replaced by its bare crossing "
        f"(views, JAX call, export: {bare['with crossing']:.0f} us, timed in that step; against sdpa's step "
        f"in the same rounds, {sdpa_there:.0f} us) | {in_step:.0f} | {1e6 / in_step:.0f} | {in_step_ratio:.2f}x |"
    )
    crossing = split["views"] + split["call"]
    lines += ["", f"where the tpu_kernels step goes, timed inside it ({split['call calls']:.0f} JAX calls per step; "
              "medians of rounds, so the parts need not add up exactly)", "",
              "| part | us per step |", "|---|---|",
              f"| HF's own work (outside the swapped modules) | {split['step'] - split['swapped']:.0f} |",
              f"| the patched modules' own torch work, around the op calls | {split['swapped'] - split['ops']:.0f} |",
              "| tpu_kernels' layers: the public functions' checks, call_op, the shortcut's key and lookup "
              f"| {split['ops'] - crossing:.0f} |",
              f"| the crossing: the arguments' JAX views | {split['views']:.0f} |",
              f"| the crossing: the JAX call and the result's export | {split['call']:.0f} |",
              f"| the step (instrumented) | {split['step']:.0f} |"]  # fmt: skip
    lines += cpu_report(r["cpu"])
    ratio = sdpa / tk_step
    if in_step_ratio < 0.8:
        verdict = "the crossing alone forbids 0.8x: at its cost inside a step, it leaves the step below it"
    elif sdpa / floor < 0.8:
        verdict = (
            "the crossing alone forbids 0.8x: the swapped calls' own JAX functions leave the step below it"
        )
    else:
        verdict = "the crossing alone does not forbid 0.8x: the rest is tpu_kernels' per-call layers and the patched modules"
    lines += ["", f"goal (issue 24): tpu_kernels at least 0.8x sdpa: {ratio:.2f}x: "
              f"{'met' if ratio >= 0.8 else 'MISSED'}; floor {sdpa / floor:.2f}x in loops of its own, "
              f"{in_step_ratio:.2f}x inside a step: {verdict}"]  # fmt: skip
    return lines


def cpu_report(cpu: dict[str, dict]) -> list[str]:
    """The threads' CPU time over the decode steps of each model (`_decode_step.decode_steps_cpu`)."""
    steps = next(iter(cpu.values()))["steps"]
    lines = ["", f"CPU time over {steps} decode steps, per thread of the process", "",
             "| model | wall s | CPU s | main thread s | other threads s | other threads' share "
             "| other threads by name (CPU s) |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, c in cpu.items():
        by_name = sorted(c["other_threads_by_name_s"].items(), key=lambda kv: -kv[1])
        names = ", ".join(f"{n} {s:.2f}" for n, s in by_name) or "-"
        lines.append(
            f"| {name} | {c['wall_s']:.2f} | {c['process_s']:.2f} | {c['main_s']:.2f} | "
            f"{c['other_threads_s']:.2f} | {c['other_share']:.1%} | {names} |"
        )
    return lines


def _same(values: list[int]) -> str:
    distinct = sorted(set(values))
    return str(distinct[0]) if len(distinct) == 1 else "/".join(map(str, distinct)) if distinct else "-"


def _run_child(path: str, new_tokens: int, repeat: int, threads: int) -> dict:
    args = [
        "--child",
        path,
        "--new-tokens",
        str(new_tokens),
        "--repeat",
        str(repeat),
        "--threads",
        str(threads),
    ]
    with tempfile.TemporaryDirectory(prefix="tpu-kernels-generate-") as d:
        return run_child(__file__, args, what=f"generate child for {path}", cache_dir=d, timeout=900)


def table(results: dict[str, dict]) -> str:
    lines = [
        "| attention | first generate() | compiles: attention (all ops) | then a new prompt length "
        "| compiles: attention (all ops) | steady tokens/s |",
        "|---|---|---|---|---|---|",
    ]
    for path, r in results.items():
        compiles = (
            (
                f"{r['first_compiles']} ({r['first_compiles_all_ops']})",
                f"{r['new_len_compiles']} ({r['new_len_compiles_all_ops']})",
            )
            if path != "sdpa"
            else ("-", "-")
        )
        lines.append(
            f"| {path} | {r['first_s']:.2f} s | {compiles[0]} | {r['new_len_s']:.2f} s | {compiles[1]} "
            f"| {r['tokens_per_s']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, from {', '.join(PATHS)}")
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--repeat", type=int, default=5, help="steady-state generate() runs (median)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads in each process")
    p.add_argument("--json", type=Path, help="write the raw figures here")
    p.add_argument("--breakdown", action="store_true", help="where a decode step goes (one process)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child == "breakdown":
        print(json.dumps(breakdown(args.threads)))
        return 0
    if args.child:
        print(json.dumps(child(args.child, args.new_tokens, args.repeat, args.threads)))
        return 0
    if args.breakdown:
        with tempfile.TemporaryDirectory(prefix="tpu-kernels-generate-") as d:
            r = run_child(__file__, ["--child", "breakdown", "--threads", str(args.threads)],
                          what="breakdown child", cache_dir=d, timeout=1800)  # fmt: skip
        print("tiny Llama, one decode step after an 8-token prompt and 4 new tokens")
        return finish(breakdown_report(r), r, args.json)
    paths = [q for q in args.paths.split(",") if q]
    unknown = sorted(set(paths) - set(PATHS))
    if unknown:
        p.error(f"unknown paths {unknown}; choose from {', '.join(PATHS)}")
    results = {}
    for path in paths:
        print(f"  {path}...", file=sys.stderr)
        results[path] = _run_child(path, args.new_tokens, args.repeat, args.threads)
    print(f"tiny Llama, greedy, {args.new_tokens} new tokens from an 8-token prompt, then a 13-token one")
    return finish([table(results)], results, args.json)


if __name__ == "__main__":
    sys.exit(main())
