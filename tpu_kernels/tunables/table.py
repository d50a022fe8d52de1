"""A tuning table: one op's tuned configs as a JSON file meant to be read and committed.

    {
      "format": "tpu_kernels.tuning/1",
      "op": "tpu_kernels::softmax",
      "tunables": {"block_rows": [256, 8, 32, 128, 512]},
      "entries": [
        {"chip": "v6e", "dtypes": ["bfloat16"], "bucket": [[4096, 1024]], "toolkit": "0.1.0",
         "config": {"block_rows": 512}, "source": "measured", "shape": [[4096, 1024]], ...}
      ]
    }

An entry is keyed by (chip, dtypes, bucket, toolkit): the chip generation it was tuned for
("v6e", "cpu", "cuda:NVIDIA H200"), its tensors' dtypes, the shape bucket of its call
(`declare.default_key` unless the op has a `tune_key`) and the tpu_kernels version. `source`
says whether the config was measured on that chip or predicted by the cost model for a chip that
was not attached; the rest (`shape`, `candidates`, `method`) is the evidence, for people.

A table is written under an exclusive lock (`fcntl.flock` on its directory, so no lock file is
left beside a table meant to be committed): the writer
reads what is there, merges its entries in and replaces the file atomically (a temporary file
in the same directory, then `os.replace`), so processes tuning at once each add their entries
and a reader never sees half a file. A predicted entry never replaces a measured one (nor a
failed one: a measured run where no candidate was right, which a lookup refuses to run).

A file that is not JSON, not a tuning table, or the table of another op is refused with a
`TuningTableError` naming the file and what is wrong; nothing is overwritten. So is anything
but a regular file (a FIFO there would block the first call that reads it: tables are opened
non-blocking and checked with `fstat` before a byte is read), a file above `MAX_TABLE_BYTES`,
and, when the reader gives the op's declared candidates, an entry whose config values do not
have the candidates' exact types (`512.0` for an int tunable would reach the kernel as a
float static; `true` is not `1`).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpu_kernels.errors import TpuKernelsError

FORMAT = "tpu_kernels.tuning/1"
SOURCES = ("measured", "predicted", "failed")  # failed: measured, and no candidate was right
SUFFIX = ".tuning.json"
MAX_TABLE_BYTES = 16 << 20
"""The largest table read (a table of thousands of entries is a few MiB): a bigger file is
refused, not read into memory."""


class TuningTableError(TpuKernelsError, ValueError):
    """A tuning table that cannot be used: not JSON, not a tuning table, another op's, or an
    entry without the fields a lookup needs. The message names the file."""


Key = tuple[str, tuple, tuple, str]  # (chip, dtypes, bucket, toolkit)


@dataclass(frozen=True)
class Entry:
    """One tuned config: where it applies (chip, dtypes, bucket, toolkit) and what it is."""

    chip: str
    dtypes: tuple
    bucket: tuple
    toolkit: str
    config: Mapping[str, Any]
    source: str  # "measured", "predicted", or "failed" (no candidate ran right: config is empty)
    evidence: Mapping[str, Any] = field(default_factory=dict)  # shape, candidates, method, ...

    @property
    def key(self) -> Key:
        return (self.chip, self.dtypes, self.bucket, self.toolkit)

    def to_json(self) -> dict[str, Any]:
        return {
            "chip": self.chip,
            "dtypes": list(self.dtypes),
            "bucket": _lists(self.bucket),
            "toolkit": self.toolkit,
            "config": dict(self.config),
            "source": self.source,
            **{k: v for k, v in self.evidence.items() if k not in _KEY_FIELDS},
        }


_KEY_FIELDS = ("chip", "dtypes", "bucket", "toolkit", "config", "source")


@dataclass
class Table:
    """One op's table: the tunables' candidate values when it was written, and its entries."""

    op: str
    tunables: dict[str, list[Any]]
    entries: dict[Key, Entry] = field(default_factory=dict)

    def add(self, entries: Iterable[Entry]) -> None:
        """Merge `entries` in: a newer entry replaces the one with its key, except that a
        predicted entry never replaces a measured one."""
        for e in entries:
            old = self.entries.get(e.key)
            if old is not None and old.source != "predicted" and e.source == "predicted":
                continue
            self.entries[e.key] = e

    def to_json(self) -> str:
        entries = sorted(self.entries.values(), key=lambda e: json.dumps(_lists(e.key), default=str))
        doc = {
            "format": FORMAT,
            "op": self.op,
            "tunables": self.tunables,
            "entries": [e.to_json() for e in entries],
        }
        return pretty(doc) + "\n"


def pretty(value: Any, indent: int = 0, width: int = 110) -> str:
    """JSON for people: a value that fits on the rest of its line stays on it, a longer object or
    list gets one member per line, two spaces deeper (one entry reads as a few lines, in diffs too)."""
    flat = json.dumps(value)
    if len(flat) + indent <= width or not isinstance(value, (dict, list)) or not value:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k)}: {pretty(v, indent + 2, width)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + pretty(v, indent + 2, width) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def filename(op: str) -> str:
    """The table's file name for the op "ns::name": `ns.name.tuning.json`."""
    return op.replace("::", ".") + SUFFIX


def parse(
    text: str, path: str | Path, op: str, candidates: Mapping[str, Sequence[Any]] | None = None
) -> Table:
    """The table in `text` (read from `path`, named in errors) for the op `op`; with
    `candidates` (each tunable's declared values), each entry's config values must have the
    exact type of one of their tunable's candidates."""
    where = str(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise TuningTableError(
            f"{where}: not a tuning table: invalid JSON at line {e.lineno}, column {e.colno} ({e.msg}). "
            "Delete or restore the file (tuning writes it again)."
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise TuningTableError(
            f"{where}: not a tpu_kernels tuning table (format {got!r}, expected {FORMAT!r})."
        )
    if doc.get("op") != op:
        raise TuningTableError(
            f"{where}: holds the tuning of {doc.get('op')!r}, not of {op!r}; a table belongs to one op "
            f"(its file is named {filename(op)!r})."
        )
    tunables = doc.get("tunables")
    entries = doc.get("entries")
    if not isinstance(tunables, dict) or not isinstance(entries, list):
        raise TuningTableError(
            f"{where}: a tuning table needs 'tunables' (an object) and 'entries' (a list)."
        )
    parsed = [_entry(where, i, e) for i, e in enumerate(entries)]
    if candidates is not None:
        for i, e in enumerate(parsed):
            _check_types(where, i, op, e, candidates)
    table = Table(op, tunables)
    table.add(parsed)
    return table


def _check_types(where: str, i: int, op: str, e: Entry, candidates: Mapping[str, Sequence[Any]]) -> None:
    """An entry's config values have the exact types of their tunable's candidates (a value of
    an undeclared tunable is the lookup's to refuse, as stale)."""
    for name, value in e.config.items():
        declared = candidates.get(name)
        if declared is None:
            continue
        types = list(dict.fromkeys(type(c) for c in declared))
        if type(value) not in types:
            raise TuningTableError(
                f"{where}: entry {i}, of {op} for chip {e.chip!r}, dtypes {list(e.dtypes)}, bucket "
                f"{_lists(e.bucket)}, toolkit {e.toolkit!r}, gives {name}={json.dumps(value)} "
                f"({type(value).__name__}), but {name}'s declared candidates are "
                f"{' or '.join(t.__name__ for t in types)} ({', '.join(map(repr, declared))}): a config's "
                "values have the candidates' exact types. Fix or delete the entry (tuning writes it again)."
            )


def _entry(where: str, i: int, e: Any) -> Entry:
    def bad(why: str) -> TuningTableError:
        return TuningTableError(f"{where}: entry {i}: {why}.")

    if not isinstance(e, dict):
        raise bad(f"an entry is an object, got {type(e).__name__}")
    missing = [k for k in _KEY_FIELDS if k not in e]
    if missing:
        raise bad(f"missing {', '.join(missing)}")
    if not isinstance(e["chip"], str) or not isinstance(e["toolkit"], str):
        raise bad("'chip' and 'toolkit' are strings")
    if not isinstance(e["dtypes"], list) or not isinstance(e["bucket"], list):
        raise bad("'dtypes' and 'bucket' are lists")
    if not isinstance(e["config"], dict) or not (e["config"] or e["source"] == "failed"):
        raise bad("'config' is a non-empty object of tunable values")
    if e["source"] not in SOURCES:
        raise bad(f"'source' is one of {', '.join(SOURCES)}, got {e['source']!r}")
    return Entry(
        chip=e["chip"],
        dtypes=_tuples(e["dtypes"]),
        bucket=_tuples(e["bucket"]),
        toolkit=e["toolkit"],
        config=dict(e["config"]),
        source=e["source"],
        evidence={k: v for k, v in e.items() if k not in _KEY_FIELDS},
    )


def read(path: str | Path, op: str, candidates: Mapping[str, Sequence[Any]] | None = None) -> Table | None:
    """The table at `path`, None when there is no file; a TuningTableError when it cannot be used
    (`candidates`: see `parse`)."""
    p = Path(path)
    try:
        text = _read_regular(p).decode()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise TuningTableError(f"{p}: cannot be read as a tuning table ({e}).") from None
    return parse(text, p, op, candidates)


def _read_regular(p: Path) -> bytes:
    """The bytes of the regular file `p`, at most MAX_TABLE_BYTES: opened non-blocking and checked
    with fstat first, so a FIFO or a device there is refused instead of blocking the reader."""
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TuningTableError(
                f"{p}: not a regular file ({_kind(st.st_mode)}); a tuning table is a JSON file. Remove it, "
                "or point TPU_KERNELS_TUNING_DIR elsewhere."
            )
        chunks, size = [], 0
        while size <= MAX_TABLE_BYTES and st.st_size <= MAX_TABLE_BYTES:  # a big file: not a byte read
            chunk = os.read(fd, min(1 << 20, MAX_TABLE_BYTES + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if max(st.st_size, size) > MAX_TABLE_BYTES:
            raise TuningTableError(
                f"{p}: {max(st.st_size, size)} bytes, above the {MAX_TABLE_BYTES} bytes a tuning table may have "
                "(tpu_kernels.tunables.table.MAX_TABLE_BYTES); not read."
            )
        return b"".join(chunks)
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a file"


def write(path: str | Path, op: str, tunables: dict[str, list[Any]], entries: Iterable[Entry]) -> Table:
    """Merge `entries` into the table at `path` (created if absent) under the lock; -> the table
    as written. A file there that is not this op's table is refused, never overwritten."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with locked(p):
        table = read(p, op) or Table(op, {})
        table.tunables = tunables
        table.add(entries)
        replace_file(p, table.to_json())
    return table


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock for writing `path`, across processes: `flock` on its directory."""
    import fcntl

    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def replace_file(path: Path, text: str) -> None:
    """Write `text` to `path` atomically: a reader sees the old file or the new one, whole (the
    on-disk kernel cache's writer: a temporary file beside it, readable by all, then a rename)."""
    from tpu_kernels.runtime.cache.store import write_atomic

    write_atomic(path, text.encode())


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _lists(v: Any) -> Any:
    return [_lists(x) for x in v] if isinstance(v, tuple) else v
