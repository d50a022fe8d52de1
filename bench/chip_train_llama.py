"""A small Llama trained for STEPS steps on a TPU through torch, twice from the same weights on
the same batches: once as Hugging Face builds it (eager attention: torch_tpu's SDPA backward
does not compile, tests/tpu/test_transformers_shipped.py; the loss from the whole logits), and
once with tpu_kernels' shipped attention and fused LM head + loss patched in
(`apply_tpu_kernels(model, rms_norm=False, mlp=False, attention="shipped", loss="shipped")`).
Each step's loss and time go to the record; the two curves should agree to bf16 noise.

The data is learnable at once: each sequence walks the vocabulary with a fixed stride from a
random start, so the loss falls from log(vocabulary) within a few steps.

    python3 bench/chip_train_llama.py [--steps N] [--out FILE] [--cpu]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

STEPS = 20
CONFIG = dict(  # a small Llama: 4 layers, GQA 2:1, a 32k vocabulary (the LM head is a third of the weights)
    hidden_size=512,
    intermediate_size=1376,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=64,
    vocab_size=32000,
    max_position_embeddings=2048,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
BATCH, SEQ = 8, 512


def batches(steps: int, seed: int = 0):
    import torch

    gen = torch.Generator().manual_seed(seed)
    vocab = CONFIG["vocab_size"]
    for _ in range(steps):
        start = torch.randint(3, vocab, (BATCH, 1), generator=gen)
        stride = torch.tensor([1, 2, 3, 5, 7, 11, 13, 17])[torch.randint(0, 8, (BATCH, 1), generator=gen)]
        ids = (start + stride * torch.arange(SEQ)) % (vocab - 3) + 3
        labels = ids.clone()
        labels[:, :16] = -100  # a prompt the loss leaves out
        yield ids, labels


def train(model, device, steps: int) -> list[dict]:
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, foreach=False)
    model.train()
    rows = []
    for step, (ids, labels) in enumerate(batches(steps)):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids.to(device), labels=labels.to(device)).loss
        loss.backward()
        opt.step()
        value = float(loss.detach().float().cpu())  # waits for the step
        rows.append({"step": step, "loss": value, "seconds": round(time.perf_counter() - t0, 4)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "chip_train_llama.json"))
    ap.add_argument("--cpu", action="store_true", help="no TPU: a few steps on the CPU, smaller")
    ap.add_argument("--only", choices=("hf_eager", "tpu_kernels"), help="train one of the two")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers

    from tpu_kernels.integrations.transformers import apply_tpu_kernels

    device = torch.device("cpu" if args.cpu else "tpu")
    if args.cpu:
        global BATCH, SEQ
        BATCH, SEQ = 2, 64
        CONFIG.update(num_hidden_layers=1, vocab_size=1000)
    torch.manual_seed(0)
    base = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).to(torch.bfloat16)
    base.set_attn_implementation("eager")
    patched = copy.deepcopy(base)
    swapped = apply_tpu_kernels(patched, rms_norm=False, mlp=False, attention="shipped", loss="shipped")
    record = {
        "config": CONFIG,
        "batch": BATCH,
        "seq": SEQ,
        "dtype": "bfloat16",
        "swapped": swapped,
        "commit": os.environ.get("TPU_KERNELS_COMMIT"),
        "date": time.strftime("%Y-%m-%d"),
    }
    for name, model in (("hf_eager", base), ("tpu_kernels", patched)):
        if args.only not in (None, name):
            continue
        record[name] = train(model.to(device), device, args.steps)
        model.to("cpu")
    if args.only is None:
        a, b = ([r["loss"] for r in record[k]] for k in ("hf_eager", "tpu_kernels"))
        record["max_abs_loss_difference"] = max(abs(x - y) for x, y in zip(a, b))
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
    print(json.dumps({k: record.get(k) for k in ("swapped", "max_abs_loss_difference")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
