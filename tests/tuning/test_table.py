"""Tuning tables: the format, what is refused, merging, and writers in several processes at once."""

import contextlib
import json
import multiprocessing
import os
import socket
import threading
import time

import pytest

from tpu_kernels.tunables import table
from tpu_kernels.tunables.table import Entry, TuningTableError

OP = "test_table::op"


def _entry(chip="cpu", bucket=((512, 128),), config=None, source="measured", toolkit="0.1.0", **evidence):
    return Entry(chip, ("float32",), bucket, toolkit, config or {"block_rows": 64}, source, evidence)


def test_a_table_round_trips_through_its_file(tmp_path):
    path = tmp_path / table.filename(OP)
    assert path.name == "test_table.op.tuning.json"
    e = _entry(shape=[[300, 128]], candidates=[{"config": {"block_rows": 64}, "status": "chosen"}])
    written = table.write(path, OP, {"block_rows": [64, 128]}, [e])
    back = table.read(path, OP)
    assert back.entries == written.entries == {e.key: e}
    assert back.tunables == {"block_rows": [64, 128]}
    doc = json.loads(path.read_text())
    assert doc["format"] == table.FORMAT and doc["op"] == OP
    assert doc["entries"][0]["bucket"] == [[512, 128]] and doc["entries"][0]["shape"] == [[300, 128]]


def test_a_missing_file_is_no_table(tmp_path):
    assert table.read(tmp_path / "none.tuning.json", OP) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", r"not a tuning table: invalid JSON at line 1, column 2"),
        ("[1, 2]", r"not a tpu_kernels tuning table \(format 'list'"),
        (
            '{"format": "other/1"}',
            r"not a tpu_kernels tuning table \(format 'other/1', expected 'tpu_kernels.tuning/1'\)",
        ),
        (
            '{"format": "tpu_kernels.tuning/1", "op": "x::y", "tunables": {}, "entries": []}',
            r"holds the tuning of 'x::y', not of 'test_table::op'",
        ),
        (
            '{"format": "tpu_kernels.tuning/1", "op": "test_table::op"}',
            r"needs 'tunables' \(an object\) and 'entries' \(a list\)",
        ),
        (
            '{"format": "tpu_kernels.tuning/1", "op": "test_table::op", "tunables": {}, "entries": [{"chip": "cpu"}]}',
            r"entry 0: missing dtypes, bucket, toolkit, config, source",
        ),
        (
            '{"format": "tpu_kernels.tuning/1", "op": "test_table::op", "tunables": {}, "entries": [{"chip": "cpu", "dtypes": [], "bucket": [], "toolkit": "0", "config": {"b": 1}, "source": "guessed"}]}',
            r"entry 0: 'source' is one of measured, predicted, failed, got 'guessed'",
        ),
    ],
)
def test_a_corrupt_or_foreign_table_is_refused_naming_the_file(tmp_path, text, message):
    path = tmp_path / table.filename(OP)
    path.write_text(text)
    with pytest.raises(TuningTableError, match=message) as e:
        table.read(path, OP)
    assert str(path) in str(e.value)
    with pytest.raises(TuningTableError):  # and never overwritten
        table.write(path, OP, {}, [_entry()])
    assert path.read_text() == text


def test_entries_merge_and_a_prediction_never_replaces_a_measurement(tmp_path):
    (tmp_path / "t").mkdir()
    path = tmp_path / "t" / table.filename(OP)
    table.write(path, OP, {}, [_entry(config={"block_rows": 64})])
    table.write(path, OP, {}, [_entry(config={"block_rows": 256}, source="predicted")])
    assert table.read(path, OP).entries[_entry().key].config == {"block_rows": 64}
    table.write(path, OP, {}, [_entry(config={"block_rows": 128}), _entry(chip="v6e", source="predicted")])
    got = table.read(path, OP).entries
    assert got[_entry().key].config == {"block_rows": 128}  # a newer measurement replaces
    assert got[_entry(chip="v6e").key].source == "predicted"
    assert os.listdir(path.parent) == [path.name]  # no lock or temporary file left


def _writer(path: str, i: int, n: int) -> None:
    for j in range(n):
        table.write(
            path, OP, {"block_rows": [8]}, [_entry(bucket=((i, j),), config={"block_rows": i * 100 + j})]
        )


def test_writers_in_several_processes_keep_every_entry_and_a_valid_file(tmp_path):
    path = str(tmp_path / table.filename(OP))
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, i, 15)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    got = table.read(path, OP).entries
    assert {e.bucket for e in got.values()} == {((i, j),) for i in range(4) for j in range(15)}
    assert all(e.config == {"block_rows": e.bucket[0][0] * 100 + e.bucket[0][1]} for e in got.values())


def test_the_file_is_for_people_short_values_stay_on_one_line(tmp_path):
    path = tmp_path / table.filename(OP)
    table.write(
        path,
        OP,
        {"block_rows": [64, 128]},
        [_entry(candidates=[{"config": {"block_rows": 64}, "median_s": 1e-3}] * 3)],
    )
    text = path.read_text()
    assert '"tunables": {"block_rows": [64, 128]}' in text
    assert '{"config": {"block_rows": 64}, "median_s": 0.001}' in text
    assert json.loads(text)["entries"][0]["candidates"][2]["median_s"] == 1e-3


@contextlib.contextmanager
def released_after(fifo, seconds=10.0):
    """Whoever blocks opening `fifo` for reading gets end-of-file after at most `seconds` (a writer
    opens and closes it, every `seconds`), so a regression fails its test instead of hanging."""
    done = threading.Event()

    def release():
        while not done.wait(seconds):
            with contextlib.suppress(OSError):  # ENXIO: nobody is reading it
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def test_only_a_regular_file_is_read_and_a_fifo_never_blocks_the_reader(tmp_path):
    fifo = tmp_path / table.filename(OP)
    os.mkfifo(fifo)
    with released_after(fifo):
        for attempt in (lambda: table.read(fifo, OP), lambda: table.write(fifo, OP, {}, [_entry()])):
            start = time.monotonic()
            with pytest.raises(TuningTableError, match=r"not a regular file \(a FIFO\)") as e:
                attempt()  # a read, and a write (which reads first): refused, never replaced
            assert time.monotonic() - start < 5, "the FIFO blocked the reader"
            assert str(fifo) in str(e.value)
    assert fifo.is_fifo()
    folder = tmp_path / "d" / table.filename(OP)
    folder.mkdir(parents=True)
    with pytest.raises(TuningTableError, match=r"not a regular file \(a directory\)"):
        table.read(folder, OP)
    sock_path = tmp_path / "s.tuning.json"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock_path))
        with pytest.raises(TuningTableError, match=r"cannot be read|not a regular file"):
            table.read(sock_path, OP)  # opening a socket fails: refused all the same


def test_a_table_above_the_size_limit_is_refused_unread(tmp_path, monkeypatch):
    assert table.MAX_TABLE_BYTES >= 16 << 20  # generous: thousands of entries are a few MiB
    path = tmp_path / table.filename(OP)
    table.write(path, OP, {}, [_entry()])
    size = path.stat().st_size
    monkeypatch.setattr(table, "MAX_TABLE_BYTES", size)
    assert table.read(path, OP).entries  # at the limit: read
    monkeypatch.setattr(table, "MAX_TABLE_BYTES", size - 1)
    with pytest.raises(TuningTableError, match=rf"{size} bytes, above the"):
        table.read(path, OP)
