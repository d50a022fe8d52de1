"""A call's tuned statics: which entry applies, what the caller keeps, eager and compiled alike."""

import os
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
import torch

from tpu_kernels import TuningNote, tunables, wiring
from tpu_kernels.tunables import lookup, table
from tpu_kernels.tunables.table import Entry

from ..helpers import ROOT, rand, uname
from .kernels import make_op
from .test_table import released_after

V = lookup.toolkit_version()


def _put(op, *entries):
    table.write(tunables.write_path(op.name, None), op.name, op.tunables.space(), list(entries))
    tunables.reload()


def _e(bucket, block_rows, chip="cpu", dtypes=("float32",), toolkit=V, source="measured"):
    return Entry(chip, dtypes, bucket, toolkit, {"block_rows": block_rows}, source)


def _used(op, *args, **kwargs):
    """The statics a call gets (what KernelOp.__call__ hands the dispatcher)."""
    return op.tuned.fill(args, kwargs).get("block_rows")


def test_choose_prefers_exact_then_other_version_then_nearest():
    entries = {
        e.key: e
        for e in [_e(((512, 128),), 8), _e(((2048, 128),), 256, toolkit="0.0.1"), _e(((64, 128),), 64)]
    }
    assert lookup.choose(entries, "cpu", ("float32",), ((512, 128),), V)[1] == "exact"
    e, how = lookup.choose(entries, "cpu", ("float32",), ((2048, 128),), V)
    assert (how, e.config["block_rows"]) == ("other-version", 256)
    e, how = lookup.choose(entries, "cpu", ("float32",), ((256, 128),), V)
    assert (how, e.config["block_rows"]) == ("nearest", 8)  # log2 distance 1 from 512, 2 from 64
    assert lookup.choose(entries, "cpu", ("bfloat16",), ((512, 128),), V) == (None, "none")
    assert lookup.choose(entries, "v6e", ("float32",), ((512, 128),), V) == (None, "other-chip")
    assert lookup.choose({}, "cpu", ("float32",), ((512, 128),), V) == (None, "none")
    assert lookup.distance(((512, 128),), ((512, 128, 1),)) is None  # another rank: not near


def test_an_untuned_op_runs_its_defaults_silently():
    op = make_op(uname())
    x = rand(300, 128)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _used(op, x) is None
        torch.testing.assert_close(op(x), 2 * x)


def test_the_tuned_value_is_used_and_a_given_one_is_kept():
    op = make_op(uname())
    _put(op, _e(((512, 128),), 256))
    x = rand(300, 128)
    assert _used(op, x) == 256
    assert _used(op, x, block_rows=8) == 8  # the caller's value, never tuning's
    torch.testing.assert_close(op(x), 2 * x)
    assert op.cache_info().size == 1
    op(x, block_rows=8)
    assert op.cache_info().size == 2  # 256 (tuned) and 8 (given) are two executables


def test_each_fallback_is_said_once():
    op = make_op(uname())
    _put(op, _e(((512, 128),), 256), _e(((64, 64),), 8, chip="v6e"))
    with pytest.warns(
        TuningNote, match=r"no entry for bucket \[\(1024, 128\)\]: using the nearest, \[\(512, 128\)\]"
    ):
        assert _used(op, rand(1000, 128)) == 256
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once
        assert _used(op, rand(900, 128)) == 256
    with pytest.warns(TuningNote, match=r"no tuned config for dtypes \['bfloat16'\]"):
        assert _used(op, rand(300, 128, dtype=torch.bfloat16)) is None
    other = make_op(uname())
    _put(other, _e(((512, 128),), 256, chip="v6e"))
    with pytest.warns(
        TuningNote, match=r"no tuned config for chip 'cpu' \(the op's tables have entries for v6e\)"
    ):
        assert _used(other, rand(300, 128)) is None


def test_a_config_the_kernel_refuses_at_this_shape_falls_back_to_the_defaults():
    op = make_op(uname(), divides=True)  # block_rows must divide the rows (or exceed them)
    _put(op, _e(((512, 128),), 256))
    assert _used(op, rand(512, 128)) == 256
    x = rand(384, 128)  # bucket 512 too, but 256 does not divide 384; the default 64 does
    with pytest.warns(
        TuningNote, match=r"block_rows=256 does not fit this call's shapes \(ValueError: .*384"
    ):
        assert _used(op, x) is None
    torch.testing.assert_close(op(x), 2 * x)


def test_a_stale_entry_is_ignored():
    op = make_op(uname())
    _put(op, _e(((512, 128),), 512))  # 512 is not among the candidates (8, 64, 256)
    with pytest.warns(TuningNote, match=r"not among the op's declared candidates"):
        assert _used(op, rand(300, 128)) is None


def test_a_corrupt_table_is_refused_at_call_time_with_a_note_not_an_error(tuning_dir):
    op = make_op(uname())
    (tuning_dir / table.filename(op.name)).write_text("{oops")
    x = rand(8, 128)
    with pytest.warns(TuningNote, match=r"tuning table refused, running without it: .*invalid JSON"):
        torch.testing.assert_close(op(x), 2 * x)


def test_reload_and_new_entries_reach_the_next_call():
    op = make_op(uname())
    x = rand(300, 128)
    assert _used(op, x) is None
    table.write(tunables.write_path(op.name, None), op.name, {}, [_e(((512, 128),), 8)])
    assert _used(op, x) is None  # files are read once per process...
    tunables.reload()
    assert _used(op, x) == 8  # ...until reload()
    lookup.added(op.name, [_e(((512, 128),), 256)])
    assert _used(op, x) == 256  # what this process tunes applies at once


def test_overlays_apply_inside_their_block_only():
    op = make_op(uname())
    _put(op, _e(((512, 128),), 8))
    x = rand(300, 128)
    token = lookup.push_overlay({op.name: {_e(((512, 128),), 256).key: _e(((512, 128),), 256)}})
    try:
        assert _used(op, x) == 256
    finally:
        lookup.pop_overlay(token)
    assert _used(op, x) == 8


def _graph_statics(fn):
    """`fn` compiled (fullgraph, default dynamic), with two records: per graph compiled, the
    block_rows each of its op calls holds (`compiled`), and per call, those of the graph that
    ran (`ran`)."""
    compiled, ran = [], []

    def backend(gm, example_inputs):
        statics = [
            n.kwargs.get("block_rows")
            for n in gm.graph.nodes
            if n.op == "call_function" and "test_lookup" in str(n.target)
        ]
        compiled.append(statics)

        def run(*args):
            ran.append(statics)
            return gm.forward(*args)

        return run

    return torch.compile(fn, backend=backend, fullgraph=True), compiled, ran


def test_compiled_graphs_hold_the_tuned_value_per_bucket_without_a_graph_break():
    op = make_op(uname())
    _put(op, _e(((512, 128),), 256), _e(((1024, 128),), 8))
    fn, compiled, ran = _graph_statics(lambda x: op(x) + 1)
    for rows, want in ((300, 256), (400, 256), (1000, 8), (600, 8), (500, 256), (257, 256), (513, 8)):
        x = rand(rows, 128)
        torch.testing.assert_close(fn(x), 2 * x + 1)
        assert ran[-1] == [want], (rows, ran)
    assert len(compiled) == 3  # 300 (static), then one graph per bucket: 257..512 and 513..1024
    given, _, ran2 = _graph_statics(lambda x: op(x, block_rows=64))
    given(rand(300, 128))
    assert ran2[-1] == [64]


def test_a_compiled_graph_of_an_untuned_op_has_no_bucket_guard():
    op = make_op(uname())
    fn, compiled, ran = _graph_statics(lambda x: op(x))
    for rows in (300, 400, 1000, 3000):
        fn(rand(rows, 128))
    assert len(compiled) == 2  # static first, then one dynamic graph for every size
    assert ran[-1] == [None]


_OTHER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    import torch
    from tests.tuning.kernels import make_op
    op = make_op({name!r})
    print("USED", op.tuned.fill((torch.randn(300, 128),), {{}}).get("block_rows"))
    """
)


def test_a_table_written_by_one_process_is_used_by_another(tuning_dir):
    op = make_op(uname())
    table.write(tunables.write_path(op.name, None), op.name, op.tunables.space(), [_e(((512, 128),), 8)])
    env = {**os.environ, "TPU_KERNELS_TUNING_DIR": str(tuning_dir), "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", _OTHER.format(root=str(ROOT), name=op.name)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "USED 8" in out.stdout, out.stderr[-2000:]


class _Model(torch.nn.Module):
    def __init__(self, op, **statics):
        super().__init__()
        self.op, self.statics = op, statics

    def forward(self, x):
        return self.op(x, **self.statics) + 1


def _exported_statics(ep):
    return [n.kwargs.get("block_rows") for n in ep.graph.nodes if "test_lookup" in str(n.target)]


@pytest.mark.parametrize("strict", [True, False])
def test_export_holds_the_tuned_value_as_a_constant(strict):
    op = make_op(uname())
    _put(op, _e(((512, 128),), 256))
    ep = torch.export.export(_Model(op), (rand(300, 128),), strict=strict)
    assert _exported_statics(ep) == [256]
    x = rand(300, 128)
    torch.testing.assert_close(ep.module()(x), 2 * x + 1)


def test_a_dynamic_export_of_a_tuned_op_is_bounded_by_its_bucket_unless_the_tunable_is_given():
    from torch.export import Dim

    op = make_op(uname())
    _put(op, _e(((512, 128),), 256))
    with pytest.raises(Exception, match=r"257 <= .*size\(\)\[0\].* <= 512"):
        torch.export.export(_Model(op), (rand(300, 128),), dynamic_shapes={"x": {0: Dim("rows")}})
    rows = Dim("rows", min=257, max=512)
    ep = torch.export.export(_Model(op), (rand(300, 128),), dynamic_shapes={"x": {0: rows}})
    assert _exported_statics(ep) == [256]
    ep = torch.export.export(_Model(op, block_rows=8), (rand(300, 128),), dynamic_shapes={"x": {0: Dim("r")}})
    assert _exported_statics(ep) == [8]
    torch.testing.assert_close(ep.module()(x := rand(1000, 128)), 2 * x + 1)


def test_under_autocast_the_lookup_keys_by_the_dtypes_the_kernel_runs_in():
    op = make_op(uname(), autocast="lower_precision_fp")
    _put(op, _e(((512, 128),), 256, dtypes=("bfloat16",)), _e(((512, 128),), 8))
    x = rand(300, 128)
    assert _used(op, x) == 8
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _used(op, x) == 256  # the kernel sees bfloat16
        y = op(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), 2 * x.bfloat16().float())
    assert _used(op, x) == 8


def test_checked_mode_and_vmap_run_tuned_calls():
    import tpu_kernels

    op = make_op(uname())
    _put(op, _e(((512, 128),), 256), _e(((16, 128),), 8))
    x = rand(300, 128)
    with tpu_kernels.checked(strict=True):  # the reference ignores the tunable
        torch.testing.assert_close(op(x), 2 * x)
    xs = rand(3, 16, 128)
    torch.testing.assert_close(torch.vmap(op)(xs), 2 * xs)


# ---- the rules a lookup keeps (issue 46: edits of lookup.py the tests above let through) ----


def _versions():
    from hypothesis import strategies as st

    return st.lists(
        st.tuples(st.integers(0, 12), st.integers(0, 12), st.integers(0, 12)).map(
            lambda v: ".".join(map(str, v))
        ),
        min_size=1,
        max_size=5,
        unique=True,
    ).filter(lambda vs: V not in vs)


def test_among_other_versions_the_newest_wins_compared_as_versions():
    entries = [_e(((512, 128),), b, toolkit=t) for b, t in ((8, "0.0.1"), (64, "0.9.0"), (256, "0.10.0"))]
    e, how = lookup.choose({e.key: e for e in entries}, "cpu", ("float32",), ((512, 128),), V)
    assert (how, e.toolkit, e.config["block_rows"]) == ("other-version", "0.10.0", 256)  # not "0.9.0"


def test_the_newest_version_wins_whatever_the_versions_and_with_or_without_packaging():
    from hypothesis import given, settings

    @settings(max_examples=60, deadline=None)
    @given(_versions())
    def check(versions):
        entries = {e.key: e for e in (_e(((512, 128),), 8, toolkit=t) for t in versions)}
        e, _ = lookup.choose(entries, "cpu", ("float32",), ((512, 128),), V)
        newest = max(versions, key=lambda t: tuple(map(int, t.split("."))))
        assert e.toolkit == newest
        assert sorted(versions, key=lookup._plain_version_order) == sorted(versions, key=lookup.version_order)

    check()
    order = ["0.1.0.dev1", "0.1.0rc1", "0.1.0", "0.1.1", "0.9.0", "0.10.0", "1.0", "1.0.1"]
    assert sorted(reversed(order), key=lookup._plain_version_order)[2:] == order[2:]  # no packaging: releases
    assert sorted(reversed(order), key=lookup.version_order) == order


def test_the_tuning_directory_takes_precedence_over_the_table_beside_the_kernel_key_by_key(
    tmp_path, monkeypatch
):
    op = make_op(uname())
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setattr(op.tuned, "home", home)
    table.write(home / table.filename(op.name), op.name, {}, [_e(((512, 128),), 8), _e(((1024, 128),), 8)])
    _put(op, _e(((512, 128),), 256))  # in $TPU_KERNELS_TUNING_DIR
    assert [p.parent for p in op.tuned.paths()] == [tunables.write_path(op.name, None).parent, home]
    assert _used(op, rand(300, 128)) == 256  # the tuning directory's entry
    assert _used(op, rand(1000, 128)) == 8  # a key only the table beside the kernel has


def test_the_memo_keeps_what_each_call_gave():
    from .kernels import make_op2

    for order in ((), ("block_rows",)), (("block_rows",), ()):
        op = make_op2(uname())
        _put(op, Entry("cpu", ("float32",), ((512, 128),), V, {"block_rows": 256, "lanes": 256}, "measured"))
        x = rand(300, 128)
        for given in order:
            kwargs = {n: 8 for n in given}
            got = op.tuned.fill((x,), kwargs)
            # the caller's value kept, the rest tuned: whatever call came first with these shapes
            assert (got["block_rows"], got["lanes"]) == (8 if given else 256, 256), (order, given)


def test_a_predicted_entry_never_replaces_a_measured_one_in_memory():
    op = make_op(uname())
    _put(op, _e(((512, 128),), 8))
    x = rand(300, 128)
    assert _used(op, x) == 8
    lookup.added(op.name, [_e(((512, 128),), 256, source="predicted")])
    assert _used(op, x) == 8  # as in the file (table.Table.add): measured stays
    lookup.added(op.name, [_e(((512, 128),), 64)])
    assert _used(op, x) == 64  # a new measurement does replace it


@pytest.mark.parametrize("how", ["nearest", "other-version", "none", "exact"])
def test_with_autotune_on_a_call_without_an_exact_entry_is_tuned_for_its_own_key(how, monkeypatch):
    op = make_op(uname())
    existing = {
        "nearest": _e(((64, 128),), 8),
        "other-version": _e(((512, 128),), 8, toolkit="0.0.1"),
        "none": _e(((512, 128),), 8, dtypes=("bfloat16",)),
        "exact": _e(((512, 128),), 8),
    }[how]
    _put(op, existing)
    tuned_for = []

    def tuner(target, args, kwargs):  # stands in for tpu_kernels.autotuner's online tuning
        tuned_for.append(target.tuned.key_of(args, kwargs)[2])
        lookup.added(target.name, [_e(((512, 128),), 256)])
        return True

    monkeypatch.setitem(wiring._INSTALLED, "online_tuner", tuner)
    monkeypatch.setenv(lookup.AUTOTUNE_ENV, "1")
    tunables.reload()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningNote)
        got = _used(op, rand(300, 128))
    if how == "exact":
        assert (tuned_for, got) == ([], 8)
    else:
        assert (tuned_for, got) == ([((512, 128),)], 256)  # tuned once, for its own bucket


@pytest.mark.parametrize(
    ("config", "candidates", "bad"),
    [
        ({"block_rows": 512.0}, {"block_rows": [8, 64, 512]}, r"block_rows=512\.0 \(float\).* int "),
        ({"block_rows": True}, {"block_rows": [8, 64, 512]}, r"block_rows=true \(bool\).* int "),
        ({"flag": 1}, {"flag": [False, True]}, r"flag=1 \(int\).* bool "),
        ({"scale": 2}, {"scale": [1.0, 2.0]}, r"scale=2 \(int\).* float "),
    ],
)
def test_a_config_value_of_another_type_than_the_candidates_is_refused_naming_file_op_and_key(
    tmp_path, config, candidates, bad
):
    path = tmp_path / table.filename("t::op")
    table.write(path, "t::op", candidates, [Entry("cpu", ("float32",), ((512, 128),), V, config, "measured")])
    assert table.read(path, "t::op").entries  # without the candidates: read as written
    with pytest.raises(table.TuningTableError, match=bad) as e:
        table.read(path, "t::op", candidates)
    message = str(e.value)
    assert str(path) in message and "t::op" in message and "bucket [[512, 128]]" in message and V in message
    ok = {n: v[-1] for n, v in candidates.items()}
    table.write(path, "t::op", candidates, [Entry("cpu", ("float32",), ((512, 128),), V, ok, "measured")])
    assert table.read(path, "t::op", candidates).entries  # the same value in the candidates' type passes


def test_a_float_where_the_op_declares_int_candidates_never_reaches_the_kernel(tuning_dir):
    op = make_op(uname(), candidates=(8, 64, 512))
    _put(op, _e(((512, 128),), 512.0))
    x = rand(300, 128)
    with pytest.warns(TuningNote, match=rf"refused.*{tuning_dir}.*{op.name}.*block_rows=512\.0"):
        torch.testing.assert_close(op(x), 2 * x)  # the defaults: the call never sees 512.0
    assert _used(op, x) is None


def test_a_fifo_where_a_table_belongs_is_refused_at_once(tuning_dir):
    op = make_op(uname())
    fifo = tuning_dir / table.filename(op.name)
    os.mkfifo(fifo)
    x = rand(8, 128)
    start = time.monotonic()
    with released_after(fifo), pytest.warns(TuningNote, match=r"not a regular file \(a FIFO\)"):
        assert _used(op, x) is None  # the lookup alone: the call's compile is not timed
    assert time.monotonic() - start < 5, "the FIFO blocked the call"
    torch.testing.assert_close(op(x), 2 * x)


def test_a_tuned_config_that_fits_one_precision_falls_back_at_another():
    # matmul's VMEM need depends on the float32 matmul precision a call traces at (three bf16
    # passes at "high" and "highest"): an entry tuned at "medium" with (1024, 1024, 1024) blocks
    # fits one pass and not three. The lookup validates and memoizes per precision, so at
    # "highest" the call runs the defaults with a note instead of raising the kernel's refusal.
    from tpu_kernels.kernels import matmul

    a, b = rand(2048, 1024), rand(1024, 1024)
    bucket = ((2048, 1024), (1024, 1024))  # the call's own bucket: an exact entry

    def close(out):  # normwise: an elementwise bound fails on cancellation (one element in 2M)
        assert ((out.double() - exact).norm() / exact.norm()).item() < 1e-5

    config = {"block_m": 1024, "block_n": 1024, "block_k": 1024}
    entry = Entry("cpu", ("float32", "float32"), bucket, V, config, "measured")
    token = lookup.push_overlay({matmul.name: {entry.key: entry}})
    before = torch.get_float32_matmul_precision()
    exact = a.double() @ b.double()
    try:
        torch.set_float32_matmul_precision("medium")
        assert matmul.tuned.fill((a, b), {}) == config
        close(matmul(a, b))
        torch.set_float32_matmul_precision("highest")
        with pytest.warns(TuningNote, match=r"does not fit this call's shapes .*need about"):
            assert matmul.tuned.fill((a, b), {}) == {}
        close(matmul(a, b))
        torch.set_float32_matmul_precision("medium")
        assert matmul.tuned.fill((a, b), {}) == config  # and back
    finally:
        torch.set_float32_matmul_precision(before)
        lookup.pop_overlay(token)


# ---- a chip without entries: the defaults at once, once a full lookup has said so ---------------


def _noted_elsewhere(op, monkeypatch):
    """`op` tuned for v6e only, its first CPU call made (the note said): -> the list that each
    full lookup (`Tuned._resolve`) appends to from now on."""
    _put(op, _e(((512, 128),), 256, chip="v6e"))
    full = []
    resolve = op.tuned._resolve

    def counted(*args, **kwargs):
        full.append(args)
        return resolve(*args, **kwargs)

    monkeypatch.setattr(op.tuned, "_resolve", counted)
    with pytest.warns(
        TuningNote, match=r"no tuned config for chip 'cpu' \(the op's tables have entries for v6e\)"
    ):
        assert _used(op, rand(300, 128)) is None
    assert len(full) == 1
    return full


def test_a_chip_without_entries_runs_the_defaults_without_a_full_lookup_once_its_note_is_said(monkeypatch):
    op = make_op(uname())
    full = _noted_elsewhere(op, monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the note is said once
        assert _used(op, rand(1000, 128)) is None  # another bucket
        assert _used(op, rand(300, 128, dtype=torch.bfloat16)) is None  # other dtypes
        assert "block_rows" not in op.tuned.fill((), {"x": rand(300, 128)})  # the tensor by keyword
        x = rand(600, 128)
        torch.testing.assert_close(op(x), 2 * x)
    assert len(full) == 1  # none of these looked the key up
    assert op.tuned_config(x).how == "defaults"  # explain: the full lookup, as before
    tunables.reload()  # forgets the notes said: the next call says it again, once
    with pytest.warns(TuningNote, match=r"no tuned config for chip 'cpu'"):
        assert _used(op, rand(2000, 128)) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _used(op, rand(3000, 128)) is None
    assert len(full) == 3  # tuned_config's, then the first call after reload


def _cpu_entry(block_rows=256):
    e = _e(((512, 128),), block_rows)
    return {e.key: e}


@pytest.mark.parametrize("how", ["added", "reload", "overlay", "autotune"])
def test_what_gives_a_chip_without_entries_a_config_reaches_the_next_call(how, monkeypatch):
    op = make_op(uname())
    full = _noted_elsewhere(op, monkeypatch)
    x = rand(300, 128)
    assert _used(op, rand(1000, 128)) is None and len(full) == 1  # the shortcut: taken
    if how == "added":  # this process tuned it
        lookup.added(op.name, list(_cpu_entry().values()))
    elif how == "reload":  # another process wrote the table
        _put(op, _e(((512, 128),), 256, chip="v6e"), _e(((512, 128),), 256))
    elif how == "overlay":  # `with result:`, entered after
        token = lookup.push_overlay({op.name: _cpu_entry()})
        try:
            assert _used(op, x) == 256
        finally:
            lookup.pop_overlay(token)
        assert _used(op, x) is None
        return
    else:  # online tuning switched on after (no reload): a call of a key not seen yet tunes it
        tuned_for = []

        def tuner(target, args, kwargs):
            bucket = target.tuned.key_of(args, kwargs)[2]
            tuned_for.append(bucket)
            lookup.added(target.name, [_e(bucket, 8)])
            return True

        monkeypatch.setitem(wiring._INSTALLED, "online_tuner", tuner)
        monkeypatch.setenv(lookup.AUTOTUNE_ENV, "1")
        assert _used(op, rand(2000, 128)) == 8
        assert tuned_for == [((2048, 128),)]
        return
    assert _used(op, x) == 256


def test_printing_switched_on_after_prints_the_next_distinct_lookup(monkeypatch, capsys):
    op = make_op(uname())
    _noted_elsewhere(op, monkeypatch)
    assert _used(op, rand(1000, 128)) is None
    capsys.readouterr()
    monkeypatch.setenv(tunables.PRINT_ENV, "1")  # no reload
    assert _used(op, rand(3000, 128)) is None
    err = capsys.readouterr().err
    assert f"{op.name} chip=cpu dtypes=['float32'] bucket=[(4096, 128)]" in err, err
    assert "no entry for chip 'cpu'" in err


def test_a_chips_record_of_an_older_generation_is_not_trusted(monkeypatch):
    # a thread that read the tables before they changed may store its record after another
    # thread refreshed: the record carries the generation it was read at
    op = make_op(uname())
    _noted_elsewhere(op, monkeypatch)
    lookup.added(op.name, list(_cpu_entry().values()))
    x = rand(300, 128)
    assert _used(op, x) == 256  # refreshed
    generation, _ = op.tuned._chips
    op.tuned._chips = (generation - 1, frozenset({"v6e"}))  # a late write of the old record
    op.tuned._memo = {}
    assert _used(op, x) == 256


def test_a_compiled_graph_after_the_shortcut_holds_the_defaults_then_a_new_entry(monkeypatch):
    op = make_op(uname())
    _noted_elsewhere(op, monkeypatch)
    fn, _, ran = _graph_statics(lambda x: op(x) + 1)
    x = rand(300, 128)
    torch.testing.assert_close(fn(x), 2 * x + 1)
    assert ran[-1] == [None]
    lookup.added(op.name, list(_cpu_entry().values()))
    torch._dynamo.reset()  # the graph holds its constants: a new entry reaches a new trace
    fn, _, ran = _graph_statics(lambda x: op(x) + 1)
    torch.testing.assert_close(fn(x), 2 * x + 1)
    assert ran[-1] == [256]
