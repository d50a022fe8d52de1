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


def child(path: str, new_tokens: int, repeat: int, threads: int) -> dict:
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tpu_kernels.tokamax.attention.op import dot_product_attention_op as op
    from tpu_kernels.tokamax.glu.op import gated_linear_unit_op
    from tpu_kernels.tokamax.normalization.op import layer_norm_op

    ops = (op, gated_linear_unit_op, layer_norm_op)

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
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.new_tokens, args.repeat, args.threads)))
        return 0
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
