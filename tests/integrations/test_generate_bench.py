"""bench/generate.py: its child counts compiles per bucket, its table reads the figures right,
and the command harness does not pick it up as a suite (it runs fresh processes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
pytest.importorskip("transformers")
import torch  # noqa: E402

from tests.helpers import load_bench_script  # noqa: E402
from tpu_kernels.bench import discover  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def generate():
    return load_bench_script("generate")


def test_child_counts_attention_compiles_per_bucket(generate):
    from tpu_kernels.tokamax.attention.op import dot_product_attention_op

    dot_product_attention_op.cache_clear()
    r = generate.child("tpu_kernels", new_tokens=4, repeat=1, threads=torch.get_num_threads())
    # prefill and decode shapes of one bucket; the 13-token prompt is in the same bucket
    assert (r["first_compiles"], r["new_len_compiles"]) == (2, 0)
    assert r["first_compiles_all_ops"] >= r["first_compiles"]
    assert r["first_s"] > 0 and r["tokens_per_s"] > 0


def test_table(generate):
    row = dict(first_s=2.0, first_compiles=2, first_compiles_all_ops=6, new_len_s=0.5, new_len_compiles=0,
               new_len_compiles_all_ops=2, tokens_per_s=123.4)  # fmt: skip
    text = generate.table({"sdpa": {**row, "tokens_per_s": 271.0}, "tpu_kernels": row})
    assert "| sdpa | 2.00 s | - | 0.50 s | - | 271 |" in text
    assert "| tpu_kernels | 2.00 s | 2 (6) | 0.50 s | 0 (2) | 123 |" in text


def test_rows_per_decode_step_under_each_schedule(generate):
    """A decode step (batch 1) through the patched tiny Llama: 5 norm and 2 MLP calls, each on
    1 row exact, 128 rows under multiple_of(128), 8 under powers_of_two(128) (float32's tile),
    1 again under the integration's schedule (powers of two, one row as is); attention on 12
    key/value positions exact, on the 64-position bucket otherwise."""
    rows = generate.rows_per_decode_step(generate.tiny_llama(torch.get_num_threads()))
    want_rows = {"exact": 1, "multiple_of(128)": 128, "powers_of_two(128)": 8,
                 "powers_of_two(128), one row as is": 1}  # fmt: skip
    assert set(rows) == set(want_rows)
    for schedule, calls in rows.items():
        kinds = [op for op, _, _ in calls]
        assert kinds.count("tokamax::layer_norm") == 5 and kinds.count("tokamax::gated_linear_unit") == 2
        assert kinds.count("tokamax::dot_product_attention") == 2
        for op, what, n in calls:
            if op == "tokamax::dot_product_attention":
                assert (what, n) == ("kv positions", 12 if schedule == "exact" else 64), schedule
            else:
                assert (what, n) == ("rows", want_rows[schedule]), (schedule, op)


def test_breakdown_report(generate):
    calls = [{"op": "tokamax::layer_norm", "rows": 8, "tpu_kernels_us": 100.0, "jax_us": 40.0}] * 5
    r = {
        "rows": {"powers_of_two(128)": [("tokamax::layer_norm", "rows", 8)] * 5
                 + [("tokamax::dot_product_attention", "kv positions", 64)] * 2},
        "calls": calls,
        "step_us": {"sdpa": 1000.0, "tpu_kernels": 1600.0, "norms only": 1500.0},
        "hf_swapped_us": 300.0,
    }  # fmt: skip
    text = "\n".join(generate.breakdown_report(r))
    assert "| powers_of_two(128) | 5: 8 | 0: - | 40 | 2: 64 |" in text
    # in the model: (1500 - 1000) / 5 calls
    assert "| tokamax::layer_norm | 5 | +100 | 100 | 40 |" in text
    assert "| tpu_kernels | 1600 | 625 | 0.62x |" in text
    # the floor: 1000 - 300 (HF's own swapped calls) + 5 * 40 = 900 us per step
    assert (
        "minus HF's swapped calls (300 us), plus each swapped call at its JAX function's cost (200 us) | 900 | 1111 | 1.11x |"
        in text
    )
    assert text.endswith("0.62x: MISSED; floor 1.11x: the crossing alone does not forbid 0.8x: "
                         "the rest is tpu_kernels' per-call layers and the patched modules")  # fmt: skip
    r["calls"] = [dict(c, jax_us=100.0) for c in calls]  # floor 1000 - 300 + 500 = 1200 us: 0.83x
    assert "does not forbid" in "\n".join(generate.breakdown_report(r))
    r["calls"] = [dict(c, jax_us=120.0) for c in calls]  # floor 1300 us: 0.77x
    text = "\n".join(generate.breakdown_report(r))
    assert text.endswith(
        "floor 0.77x: the crossing alone forbids 0.8x: the swapped calls' own JAX functions leave the step below it"
    )


def test_hf_swapped_time_is_measured_inside_an_unpatched_step_and_the_model_is_restored(generate):
    import _decode_step as step

    model = generate.tiny_llama(torch.get_num_threads())
    forwards = {name: type(m).forward for name, m in model.named_modules()}
    attention = model.config._attn_implementation
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    saved = ALL_ATTENTION_FUNCTIONS[attention]
    assert step.hf_swapped_us(model, rounds=1, steps=2) > 0
    token, cache, length = step.decode_step_inputs(model)
    with torch.no_grad(), step._SwappedTime(model) as clock:
        model(token, cache=cache, position_ids=torch.tensor([[length - 1]]))
    assert clock.calls == 5 + 2 + 2  # the tiny Llama's norms, MLPs and attention calls of one step
    assert ALL_ATTENTION_FUNCTIONS[attention] is saved
    for name, m in model.named_modules():
        assert "forward" not in vars(m) and type(m).forward is forwards[name], name


def test_it_is_not_a_harness_suite():
    assert ROOT / "bench" / "generate.py" not in discover.suite_files(None, root=ROOT)
