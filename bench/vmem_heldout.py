"""Held-out check of the VMEM rule's calibrated choices against the v5e corpus record.

The rule's choices (tpu_kernels/lowering_check/temporaries.py: how much of each kind of body value
counts, the bound on a matmul's result, the register-spill threshold; scratch.py: whether a
scratch buffer written before it is read at every step is held) are searched on the
even-numbered calls of `bench/reports/chip_corpus_v5e.json` and held to the odd ones, and the
other way round. Among the choices that do best on the fitting half (most agreement with no
false pass) the most conservative (largest estimates) is taken. Each call's kernels are traced
once; the choices are applied to the traced body values.

    python bench/vmem_heldout.py

A plain script: figures are printed, never asserted (tests/lowering_check/test_chip_corpus.py holds the
shipped rule to the whole record).
"""

from __future__ import annotations

import itertools

from tpu_kernels.chip import corpus
from tpu_kernels.lowering.export import lowering_for_tpu
from tpu_kernels.lowering.target import chip
from tpu_kernels.lowering_check import corpus_verdicts, scratch, temporaries, vmem

MiB = 2**20
UPCAST = (0.5, 0.75, 1.0)  # the largest upcast of a block read
FURTHER = (0.0, 0.75, 1.0)  # further upcasts, of their f32 bytes (0.0: at the width they were read at)
OTHER = (0.75, 1.0, 1.25)  # other values across a reduction or matmul
PRODUCT_MAX = (0, 1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB, 1 << 40)  # a matmul's result held up to
SPILL_AFTER = (4, 6, 8, 12, 1 << 30)  # values live at once before a spill
FORWARD = (False, True)  # scratch written before read every step: not held


def _kernel(eqn, target):
    fp = vmem.footprint(eqn)
    body = temporaries.body_values(eqn)
    fwd = scratch.forwarded(eqn) if eqn.params["grid_mapping"].scratch_avals else set()
    blocks = sum(b.bytes for b in fp.buffers if not b.what.startswith("scratch"))
    scratch_held = sum(b.bytes for b in fp.buffers if b.what.startswith("scratch"))
    scratch_fwd = 0
    for j, aval in enumerate(eqn.params["grid_mapping"].scratch_avals):
        inner = getattr(aval, "inner_aval", aval)
        if j in fwd:
            scratch_fwd += vmem.tile_bytes(tuple(int(d) for d in inner.shape), inner.dtype)
    points = []  # per reduction or matmul: (largest upcast, further upcasts' f32, their read bytes, other, product)
    for pos, prim in body.barriers:
        across = [v for v in body.values if v.start < pos < v.end and v.primitive != "get"]
        ups = sorted((v for v in across if v.upcast_of), key=lambda v: v.bytes, reverse=True)
        prod = sum(v.bytes for v in body.values if v.start == pos) if prim == "dot_general" else 0
        points.append((ups[0].bytes if ups else 0, sum(v.bytes for v in ups[1:]),
                       sum(v.upcast_of for v in ups[1:]), sum(v.bytes for v in across if not v.upcast_of), prod))
    return dict(blocks=blocks, scratch=scratch_held, scratch_fwd=scratch_fwd, points=points,
                live=temporaries.most_live(body), limit=fp.vmem_limit_bytes)


def features():
    target = chip("v5e")
    by_id = {c.id: c for c in corpus.calls()}
    record = corpus_verdicts.load(corpus_verdicts.record_path("v5e"))
    rows = []
    for entry in record["calls"]:
        call = by_id.get(entry["id"])
        if call is None:
            continue
        try:
            with lowering_for_tpu(target):
                ks = [_kernel(e, target) for e in vmem.traced_pallas_calls(call.fn, *call.args)]
        except Exception:
            ks = None
        rows.append((entry["id"], bool(entry["compiles"]), ks))
    return rows, target


def fits(ks, choice, target) -> bool:
    if ks is None:
        return False
    up, further, other, pmax, spill_after, forward = choice
    for k in ks:
        temps = 0
        for big, fur_f32, fur_read, oth, prod in k["points"]:
            # further upcasts: `further` of the way from their read width to float32
            fur = further * fur_f32 if further else fur_read
            temps = max(temps, up * big + fur + other * oth + min(prod, pmax))
        if k["live"] > spill_after:
            temps += temporaries.SPILL_BYTES
        est = k["blocks"] + k["scratch"] + (0 if forward else k["scratch_fwd"]) + temps
        if k["limit"] and k["limit"] <= target.vmem_bytes and est <= target.vmem_bytes:
            limit = k["limit"]
        elif est > target.vmem_bytes or (k["limit"] or 0) > target.vmem_bytes:
            limit = target.vmem_bytes
        else:
            limit = target.scoped_vmem_bytes
        if est > limit:
            return False
    return True


def score(rows, choice, target):
    agree = fp = ff = 0
    for _, compiles, ks in rows:
        f = fits(ks, choice, target)
        agree += f == compiles
        fp += f and not compiles
        ff += compiles and not f
    return agree, fp, ff


def main() -> None:
    rows, target = features()
    shipped = (1.0, 0.0, 1.0, temporaries.MATMUL_RESULT_HELD_MAX, temporaries.SPILL_AFTER_VALUES, True)
    a, fp, ff = score(rows, shipped, target)
    print(f"shipped rule on all {len(rows)} calls: {a} agree ({a / len(rows):.1%}), {fp} false passes, {ff} false fails")
    choices = list(itertools.product(UPCAST, FURTHER, OTHER, PRODUCT_MAX, SPILL_AFTER, FORWARD))
    halves = {"even": rows[0::2], "odd": rows[1::2]}
    for fit_on, test_on in (("even", "odd"), ("odd", "even")):
        scored = []
        for c in choices:
            a, fp, ff = score(halves[fit_on], c, target)
            if fp == 0:
                scored.append((a, c))
        best = max(a for a, _ in scored)
        # most conservative of the tied: largest weights, smallest forwarded set, highest product bound, earliest spill
        tied = [c for a, c in scored if a == best]
        pick = max(tied, key=lambda c: (c[0] + max(c[1], 0.5) + c[2], c[3], -c[4], not c[5]))
        a, fp, ff = score(halves[test_on], pick, target)
        n = len(halves[test_on])
        print(f"fitted on the {fit_on} calls ({best} of {len(halves[fit_on])}, {len(tied)} choices tied): "
              f"picks upcast {pick[0]}, further {pick[1] or 'at read width'}, other {pick[2]}, product up to "
              f"{'whole' if pick[3] >= 1 << 40 else f'{pick[3] / MiB:g} MiB'}, spill after "
              f"{'never' if pick[4] >= 1 << 30 else pick[4]} live values, forwarded scratch "
              f"{'not held' if pick[5] else 'held'}; on the {test_on} calls {a} of {n} ({a / n:.1%}), "
              f"{fp} false passes, {ff} false fails")


if __name__ == "__main__":
    main()
