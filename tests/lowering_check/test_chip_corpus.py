"""The calibration corpus of the VMEM check (tpu_kernels/chip/corpus.py)."""

from __future__ import annotations

import json

import jax
import pytest

from tpu_kernels.chip import corpus
from tpu_kernels.lowering.target import chip, targeting
from tpu_kernels.lowering_check import corpus_verdicts


@pytest.fixture(scope="module")
def calls() -> list[corpus.Call]:
    return corpus.calls()


def test_corpus_is_large_unique_and_stable(calls):
    assert len(calls) >= 320
    ids = [c.id for c in calls]
    assert len(set(ids)) == len(ids)
    assert ids == [c.id for c in corpus.calls()]  # deterministic order


def test_corpus_covers_every_kernel_the_issue_names(calls):
    kernels = {c.kernel for c in calls}
    for k in (
        "matmul.matmul",
        "rmsnorm.rmsnorm",
        "rmsnorm.rmsnorm_backward",
        "softmax.softmax",
        "softmax.softmax_backward",
        "scale_add.scale_add",
        "template.elementwise",
        "template.row_reduction",
        "template.row_reduction_backward",
        "template.matmul",
        "template.matmul_backward",
        "template.flash_attention",
        "template.flash_attention_backward",
        "synthetic.gather_blocks",
        "synthetic.paged_sum",
        "synthetic.with_scratch",
        "synthetic.copy",
    ):
        assert k in kernels, k
    notes = " ".join(c.note for c in calls)
    for case in ("one-step grid", "vmem_limit_bytes", "scalar prefetch", "scratch", "float32", "vocabulary"):
        assert case in notes, case
    assert "rmsnorm_bwd/bf16[8192,4096]/block_rows=256" in {c.id for c in calls}


def _lowers_for_tpu(c: corpus.Call) -> bool:
    with targeting(chip("v5e")):
        exported = jax.export.export(jax.jit(c.fn), platforms=["tpu"])(*c.args)
    return "tpu_custom_call" in exported.mlir_module()


def test_a_sample_of_calls_lowers_for_tpu_and_the_bad_ones_do_not(calls):
    # Every call lowers (checked once over all 540 in ~20 s); a spread sample keeps this test fast.
    for c in calls[::37]:
        if c.traces:
            assert _lowers_for_tpu(c), c.id
    bad = [c for c in calls if not c.traces]
    assert bad and all(c.note.startswith("refused while tracing") for c in bad)
    for c in bad:
        with pytest.raises(ValueError):
            _lowers_for_tpu(c)


def test_compile_verdict_reports_a_failure_with_its_message(calls):
    bad = next(c for c in calls if not c.traces)
    verdict = corpus.compile_verdict(bad)
    assert verdict["id"] == bad.id and verdict["compiles"] is False
    assert "multiple of 128" in verdict["error"]


def test_compile_verdict_compiles_and_does_not_stop_at_lowering():
    """A VMEM out-of-memory is Mosaic's verdict at compile time, after the call lowered: a call
    that lowers and then fails to compile (here, on the CPU, a custom call no handler serves) is
    refused, with the compiler's message."""

    def fn(x):
        return jax.ffi.ffi_call("tpu_kernels_no_such_target", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    call = corpus.Call(
        "unserved/f32[8,128]/", "synthetic.unserved", fn, (jax.ShapeDtypeStruct((8, 128), "float32"),)
    )
    jax.jit(call.fn).lower(*call.args)  # lowers
    verdict = corpus.compile_verdict(call)
    assert verdict["compiles"] is False and "tpu_kernels_no_such_target" in verdict["error"]


def test_calls_a_kernels_wrapper_refuses_are_left_out(monkeypatch):
    """A call whose wrapper raises while tracing (its own VMEM cap on the block) is not the chip's
    to judge: the corpus leaves it out, and keeps the calls marked to be refused while tracing."""
    monkeypatch.setattr(corpus, "_traces", lambda c: True)  # no call traced here: seconds saved
    every = corpus._all_calls.__wrapped__()
    refused = next(c.id for c in every if c.traces and c.kernel == "rmsnorm.rmsnorm_backward")
    monkeypatch.setattr(corpus, "_traces", lambda c: c.id != refused)
    kept = {c.id: c for c in corpus._all_calls.__wrapped__()}
    assert refused not in kept and len(kept) == len(every) - 1
    assert any(not c.traces for c in kept.values())


def test_the_chips_record_measured_calls_of_this_corpus(calls):
    """Every call of the committed chip record is a call the corpus makes now, by id (the kernel,
    the shape and every static): a corpus that sizes its blocks, or sets its statics, otherwise
    than when the chip measured it is held to verdicts on other calls."""
    record = corpus_verdicts.load(corpus_verdicts.record_path("v5e"))
    ids = {c.id for c in calls}
    missing = [e["id"] for e in record["calls"] if e["id"] not in ids]
    assert not missing, f"{len(missing)} of the record's calls are not in the corpus, e.g. {missing[:3]}"
    assert len(record["calls"]) >= 300


def test_error_text_keeps_the_compilers_cause_past_the_limit():
    e = RuntimeError("x" * 2000 + " RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom: 17.0M of 16.0M")
    text = corpus.error_text(e)
    assert len(text) <= 610 and "CompileTimeScopedVmemOom" in text and text.startswith("RuntimeError: xx")


# ---- the check against the chip's verdicts ----------------------------------------------------

# Facts seen on a v5e before the corpus record existed (issue 45, ../shared/FACTS.md), as a
# record of the same form: the check must agree with each.
FACTS_V5E = {
    "chip": "v5e",
    "calls": [
        # the shipped rmsnorm_backward body at its shipped example (before its wrapper raised the
        # limit): 12.3 MiB of buffers, refused (its
        # float32 temporaries)
        {"id": "body_rmsnorm_bwd/bf16[8192,4096]/block_rows=256", "compiles": False, "error": "E1001"},
        # buffers of exactly 16.0 MiB compile (two-step: in and out double-buffered; one-step:
        # single): FACTS.md's "buffers at exactly 16.0 MiB already fail" is not what the corpus
        # record (bench/reports/chip_corpus_v5e.json) shows, the v5e compiled both copies
        {"id": "copy/bf16[1024,4096]/block_rows=512", "compiles": True, "error": None},
        {"id": "copy/bf16[1024,4096]/block_rows=1024", "compiles": True, "error": None},
        # a one-step grid of 24 MiB if double-buffered compiles: it is single-buffered
        {"id": "copy/bf16[768,4096]/block_rows=768", "compiles": True, "error": None},
        # vmem_limit_bytes of 100 MiB works
        {
            "id": "copy/bf16[10240,4096]/block_rows=2560,vmem_limit_bytes=104857600",
            "compiles": True,
            "error": None,
        },
    ],
}


def _tuning_sweep_facts() -> dict:
    """The v5e's verdicts on the shipped rmsnorm at bf16[8192, 4096] with 8- to 2048-row blocks,
    from the committed tuning record (its wrapper then kept the default limit, so its calls are
    the corpus's plain-body calls)."""
    record = json.loads((corpus_verdicts.REPORTS / "chip_v5e_tune.json").read_text())
    names = {"rmsnorm": "body_rmsnorm", "rmsnorm_backward": "body_rmsnorm_bwd"}
    found = []
    for row in record["tune"]["rows"]:
        if row["kernel"] in names and row["id"].endswith("/bf16[8192,4096]"):
            call = f"{names[row['kernel']]}/bf16[8192,4096]/block_rows={row['statics']['block_rows']}"
            found.append(
                {"id": call, "compiles": row["pallas"]["compiles"], "error": row["pallas"].get("error")}
            )
    return {"chip": "v5e", "calls": found}


def _held_to(record: dict, calls: list[corpus.Call]) -> dict:
    rows, missing = corpus_verdicts.compare(record, calls)
    if missing:  # a record of an older corpus: calls since dropped (e.g. blocks a wrapper now refuses)
        print(f"{len(missing)} record ids not in the corpus, e.g. {missing[:3]}")
    result = corpus_verdicts.summary(rows)
    for r in rows:
        if not r.agrees:
            print("disagrees:", r.describe())
    print(f"{result['agree']} of {result['calls']} agree ({result['agreement']:.1%})")
    return result


def test_the_check_agrees_with_the_known_chip_facts(calls):
    result = _held_to(FACTS_V5E, calls)
    assert result["agree"] == result["calls"] == len(FACTS_V5E["calls"])  # every fact's call is in the corpus


def test_the_check_agrees_with_the_chips_tuning_sweep(calls):
    facts = _tuning_sweep_facts()
    assert len(facts["calls"]) == 18 and sum(not c["compiles"] for c in facts["calls"]) == 7
    result = _held_to(facts, calls)
    assert result["agree"] == result["calls"] == 18


@pytest.mark.skipif(not corpus_verdicts.record_path("v5e").exists(), reason="no chip record committed yet")
def test_the_check_agrees_with_the_chips_record(calls):
    """>= 99% of the corpus agrees with the v5e's verdicts, and no call passes that the chip refused."""
    result = _held_to(corpus_verdicts.load(corpus_verdicts.record_path("v5e")), calls)
    assert result["calls"] >= 300
    assert not result["false_passes"], [r.describe() for r in result["false_passes"]]
    assert result["agreement"] >= 0.99


def test_the_runners_own_corpus_record_loads_as_corpus_verdicts(tmp_path):
    """`python -m tpu_kernels.chip --sections corpus --out bench/reports/chip_corpus_v5e.json`
    writes the runner's record shape; the check's calibration reads it as {"chip", "calls"}."""
    import json

    rows = [{"id": "copy/bf16[2048,4096]/block_rows=1024", "compiles": False, "error": "E1001"}]
    path = tmp_path / "chip_corpus_v5e.json"
    path.write_text(
        json.dumps({"meta": {"device_kind": "TPU v5 lite", "jax": "0.10.2"}, "corpus": {"rows": rows}})
    )
    record = corpus_verdicts.load(path)
    assert record["chip"] == "v5e" and record["calls"] == rows
