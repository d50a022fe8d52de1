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


def _report(generate, jax_us=40.0, bare=None):
    calls = [{"op": "tokamax::layer_norm", "rows": 8, "tpu_kernels_us": 100.0, "jax_us": jax_us}] * 5
    r = {
        "rows": {"powers_of_two(128)": [("tokamax::layer_norm", "rows", 8)] * 5
                 + [("tokamax::dot_product_attention", "kv positions", 64)] * 2},
        "calls": calls,
        "step_us": {"sdpa": 1000.0, "tpu_kernels": 1600.0, "norms only": 1500.0},
        "hf_swapped_us": 300.0,
        # sdpa's step with bare crossings: 1400 us, 350 of it HF's swapped calls; 1000 without
        "bare_us": bare or {"with step": 1400.0, "with swapped": 350.0, "with crossing": 500.0,
                            "without step": 1000.0},
        "split_us": {"step": 1650.0, "swapped": 900.0, "ops": 700.0, "views": 50.0, "call": 400.0,
                     "call calls": 5.0},
        "cpu": {
            "sdpa": {"steps": 300, "wall_s": 0.5, "process_s": 0.48, "main_s": 0.48, "other_threads_s": 0.0,
                     "other_share": 0.0, "other_threads_by_name_s": {}},
            "tpu_kernels": {"steps": 300, "wall_s": 1.0, "process_s": 1.25, "main_s": 1.0,
                            "other_threads_s": 0.25, "other_share": 0.2,
                            "other_threads_by_name_s": {"tf_XLAExecute": 0.2, "python": 0.05}},
        },
    }  # fmt: skip
    return "\n".join(generate.breakdown_report(r))


def test_breakdown_report(generate):
    text = _report(generate)
    assert "| powers_of_two(128) | 5: 8 | 0: - | 40 | 2: 64 |" in text
    # in the model: (1500 - 1000) / 5 calls
    assert "| tokamax::layer_norm | 5 | +100 | 100 | 40 |" in text
    assert "| tpu_kernels | 1600 | 625 | 0.62x |" in text
    # the floor: 1000 - 300 (HF's own swapped calls) + 5 * 40 = 900 us per step
    assert (
        "minus HF's swapped calls (300 us), plus each swapped call at its JAX function's cost (200 us) | 900 | 1111 | 1.11x |"
        in text
    )
    # inside a step: 1400 - 350 = 1050 us against 1000 in the same rounds
    assert (
        "(views, JAX call, export: 500 us, timed in that step; against sdpa's step in the same rounds, 1000 us) | 1050 | 952 | 0.95x |"
        in text
    )
    # the split: HF 1650 - 900, modules 900 - 700, layers 700 - (50 + 400)
    for part, us in [("HF's own work", 750), ("torch work, around the op calls", 200), ("key and lookup", 250),
                     ("JAX views", 50), ("the result's export", 400), ("the step (instrumented)", 1650)]:  # fmt: skip
        assert any(part in line and line.endswith(f"| {us} |") for line in text.splitlines()), part
    assert "(5 JAX calls per step;" in text
    assert "CPU time over 300 decode steps, per thread of the process" in text
    assert "| sdpa | 0.50 | 0.48 | 0.48 | 0.00 | 0.0% | - |" in text
    # the other threads by name, the busiest first
    assert "| tpu_kernels | 1.00 | 1.25 | 1.00 | 0.25 | 20.0% | tf_XLAExecute 0.20, python 0.05 |" in text
    assert text.endswith("0.62x: MISSED; floor 1.11x in loops of its own, 0.95x inside a step: the crossing alone "
                         "does not forbid 0.8x: the rest is tpu_kernels' per-call layers and the patched modules")  # fmt: skip
    # floor 1000 - 300 + 500 = 1200 us in loops of its own: 0.83x, and 0.95x inside: not forbidden
    assert "does not forbid" in _report(generate, jax_us=100.0)
    # 1300 us: 0.77x in loops of its own
    assert _report(generate, jax_us=120.0).endswith(
        "floor 0.77x in loops of its own, 0.95x inside a step: the crossing alone forbids 0.8x: the swapped "
        "calls' own JAX functions leave the step below it"
    )
    # inside a step: 1700 - 350 = 1350 us against 1000: 0.74x
    bare = {"with step": 1700.0, "with swapped": 350.0, "with crossing": 800.0, "without step": 1000.0}
    assert _report(generate, bare=bare).endswith(
        "0.74x inside a step: the crossing alone forbids 0.8x: at its cost inside a step, it leaves the step below it"
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
    with torch.no_grad(), step.Clocks() as clocks:
        step.time_swapped_calls(model, clocks)
        model(token, cache=cache, position_ids=torch.tensor([[length - 1]]))
    assert (
        clocks.calls["swapped"] == 5 + 2 + 2
    )  # the tiny Llama's norms, MLPs and attention calls of one step
    assert ALL_ATTENTION_FUNCTIONS[attention] is saved
    for name, m in model.named_modules():
        assert "forward" not in vars(m) and type(m).forward is forwards[name], name


def test_clocks_count_the_outermost_call_and_restore_what_they_wrapped(generate):
    import types

    import _decode_step as step

    class Box:
        def f(self, n):
            return self.f(n - 1) + 1 if n else 0  # recursion through the wrapped attribute

    box, table = Box(), {"g": lambda: 7}
    ns = types.SimpleNamespace(h=len)
    with step.Clocks() as clocks:
        clocks.attr(box, "f", "a")
        clocks.item(table, "g", "b")
        clocks.attr(ns, "h", "a", wrap=lambda timed: lambda x: timed(x) * 10)
        assert box.f(3) == 3 and table["g"]() == 7 and ns.h("abc") == 30
        assert clocks.calls == {"a": 2, "b": 1} and clocks.seconds["a"] > 0
        clocks.reset()
        assert clocks.calls == {"a": 0, "b": 0} and clocks.seconds == {"a": 0, "b": 0}
    assert "f" not in vars(box) and box.f(2) == 2  # the class's method again
    assert table["g"]() == 7 and ns.h is len


def test_bare_crossing_computes_the_op_and_the_step_measurements_leave_the_models_as_they_were(generate):
    """The floor inside a step and the tpu_kernels step's split, on the tiny Llama: each
    bare crossing returns the op's own result; every swapped call of a step gets its
    crossing (9 per step), each op call one JAX call; all wrapped attributes are restored."""
    import copy

    import _decode_step as step
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from tpu_kernels import registered_ops
    from tpu_kernels.integrations.transformers import apply_tpu_kernels, attention, layers

    base = generate.tiny_llama(torch.get_num_threads())
    patched = copy.deepcopy(base)
    apply_tpu_kernels(patched)
    calls = step.record_decode_step(patched)
    assert len(calls) == 9
    for c in calls:
        ns, name = c.op.split("::")
        with torch.no_grad():
            want = getattr(getattr(torch.ops, ns), name)(*c.args, **c.kwargs)
        want = want if isinstance(want, (tuple, list)) else [want]
        got = step.bare_crossing(c)()
        assert len(got) >= 1
        torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)

    def state():
        shortcuts = [registered_ops()[c.op]._eager_cpu for c in calls]
        return (
            {n: dict(vars(m)).get("forward") for model in (base, patched) for n, m in model.named_modules()},
            dict(ALL_ATTENTION_FUNCTIONS.items()) if hasattr(ALL_ATTENTION_FUNCTIONS, "items") else None,
            dict(vars(layers)), dict(vars(attention)),
            [(vars(s).get("_to_jax"), vars(s).get("_run"), vars(s.executor).get("run"),
              vars(s.executor).get("_to_jax")) for s in shortcuts],
        )  # fmt: skip

    before = state()
    bare = step.bare_crossings_us(base, calls, rounds=1, steps=2)
    assert bare["with crossing calls"] == 9 and bare["without crossing calls"] == 0
    assert bare["with swapped calls"] == bare["without swapped calls"] == 9
    assert bare["with step"] > bare["with crossing"] > 0 and bare["without step"] > 0
    split = step.in_model_split_us(patched, [c.op for c in calls], rounds=1, steps=2)
    assert split["call calls"] == 9 and split["ops calls"] == 9 and split["swapped calls"] == 9
    assert split["step"] > split["swapped"] > split["ops"] > split["call"] > 0 and split["views"] > 0
    assert state() == before


def test_it_is_not_a_harness_suite():
    assert ROOT / "bench" / "generate.py" not in discover.suite_files(None, root=ROOT)


def test_a_threads_cpu_time_is_read_from_its_stat_line(generate):
    import _decode_step as step

    # the name may hold spaces and parentheses; utime 250 and stime 50 ticks at 100 a second
    fields = ["S", "1", "2", "3", "0", "-1", "4194560", "10", "0", "0", "0", "250", "50", "0", "0", "20"]
    line = "4321 (tf XLA (Execute)) " + " ".join(fields) + "\n"
    assert step.parse_task_stat(line, 100) == ("tf XLA (Execute)", 3.0)


def test_cpu_shares_count_only_what_other_threads_spent_meanwhile(generate):
    import _decode_step as step

    before = {1: ("python", 5.0), 2: ("tf_XLAExecute", 1.0), 3: ("tf_XLAExecute", 2.0), 4: ("gone", 9.0)}
    # thread 5 started meanwhile (counts from 0), thread 4 ended, thread 3 spent nothing
    after = {1: ("python", 6.0), 2: ("tf_XLAExecute", 1.5), 3: ("tf_XLAExecute", 2.0), 5: ("omp", 0.25)}
    shares = step.cpu_shares(1.0, 1.75, before, after, main_tid=1)
    assert shares == {
        "main_s": 1.0,
        "process_s": 1.75,
        "other_threads_s": 0.75,
        "other_share": 0.75 / 1.75,
        "other_threads_by_name_s": {"tf_XLAExecute": 0.5, "omp": 0.25},
    }
    # no CPU time at all: a share of 0, not a division by zero; clock skew never goes negative
    assert step.cpu_shares(0.0, 0.0, {}, {}, main_tid=1)["other_share"] == 0.0
    assert step.cpu_shares(1.0, 0.999, {}, {}, main_tid=1)["other_threads_s"] == 0.0


def test_thread_cpu_time_sees_a_busy_thread_of_this_process(generate):
    import threading
    import time

    import _decode_step as step

    if not step.thread_cpu_s():
        pytest.skip("no /proc/self/task on this system")
    ids: list[int] = []
    read = threading.Event()

    def busy() -> None:
        ids.append(threading.get_native_id())
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass
        # stay alive until the reader is done: its stat file goes with the thread, and under
        # load the reader may first get the GIL only after the busy loop (flaky before)
        read.wait(timeout=10)

    before = step.thread_cpu_s()
    worker = threading.Thread(target=busy)
    worker.start()
    during = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        during = step.thread_cpu_s()
        if ids and ids[0] in during and during[ids[0]][1] > 0:
            break
    read.set()
    worker.join()
    assert threading.get_native_id() in before
    assert ids[0] not in before and during is not None and during[ids[0]][1] > 0
