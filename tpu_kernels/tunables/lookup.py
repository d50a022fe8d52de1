"""A call's tuned statics: the op's tables read for the chip it runs on, before dispatch.

`KernelOp.__call__` asks its `Tuned` for the tunables the caller left out, then calls the
operator with them as ordinary statics: eager calls, `torch.compile` (the lookup runs at
trace time; the graph holds the chosen values as constants), checked mode and the compiled
kernel caches all see a static like any other. A tunable the caller passes is never changed.
`torch.ops.<ns>.<name>(...)` called directly is the bare operator: it takes its statics as
given, defaults as declared.

Where a call's config comes from, in order:
1. the innermost `with result:` of a `tpu_kernels.autotuner.TuningResult` (this thread's);
2. the op's tables: `$TPU_KERNELS_TUNING_DIR/<file>` (if set), then `<file>` beside the module
   that defines the kernel (`table.filename`), the first taking precedence key by key. Each
   file is read once per process, at the op's first call that looks (`reload()` reads again);
3. the entry for this (chip, dtypes, shape bucket) tuned with this tpu_kernels version, else
   one tuned with another version (the newest, versions compared as versions: 0.10.0 is newer
   than 0.9.0), else the nearest bucket of the same dtypes (the smallest
   sum of |log2| distances over the dims), each of the last two with a one-time `TuningNote`;
4. nothing: the declared defaults. A note says so once when the op has entries elsewhere
   (another chip, dtype or bucket); an op nobody tuned runs its defaults silently.

An entry that records the digest of its program (`provenance.py`) is served only while the
kernel traces to the same program; a "failed" entry (a measured run found no candidate right)
raises `NoRightConfigError` and is never borrowed. `Tuned.explain` (`op.tuned_config`) says
which config a call gets and from where; `TPU_KERNELS_PRINT_TUNING=1` prints each lookup.

In eager mode a chosen config is first checked against the call's shapes with the op's
`eval_shape` (a trace, no compile; once per shapes, dtypes and float32 matmul precision, at
that precision): a config the kernel refuses at this shape falls back to the defaults with a
note. A config borrowed from the nearest
bucket is also run once and judged (the tuner's `borrow_check` hook: `wiring.HOOKS`). Under
torch.compile the bucket of a symbolic size is found by comparisons, so the graph gets range guards (`257 <= s0 <= 512`),
recompiling once per bucket, and only for ops with entries on this chip.

With `TPU_KERNELS_AUTOTUNE=1`, an eager call with no entry for its key tunes the op right
there (the registered online tuner, `tpu_kernels.autotuner`), writes the table and uses the
result; otherwise nothing is ever tuned implicitly.
"""

from __future__ import annotations

import contextvars
import math
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from tpu_kernels import _compat, wiring
from tpu_kernels.dispatch.autocast import dtype_under
from tpu_kernels.errors import TpuKernelsError
from tpu_kernels.runtime import precision
from tpu_kernels.tunables import recording
from tpu_kernels.tunables import table as tables
from tpu_kernels.tunables.chip_name import chip_of
from tpu_kernels.tunables.declare import Tunables, default_key, key_arguments
from tpu_kernels.tunables.provenance import (
    PRINT_ENV,
    Looked,
    TunedConfig,
    digest_values,
    forget_printed,
    print_lookup,
)

TUNING_DIR_ENV = "TPU_KERNELS_TUNING_DIR"
AUTOTUNE_ENV = "TPU_KERNELS_AUTOTUNE"


class NoRightConfigError(TpuKernelsError, RuntimeError):
    """Tuning found no candidate config that runs and is right at a call's shape bucket: the
    op is not run with a config known to be wrong. The message names the op, the shapes and
    where the failure is recorded."""


def no_right_config(op: str, chip: str, shapes: Any, bucket: Any, why: str, where: str) -> NoRightConfigError:
    return NoRightConfigError(
        f"{op}: no tuning candidate runs and is right at shapes {shapes} (bucket {list(bucket)}) on "
        f"{chip!r}: {why}. Recorded in {where}, so no process runs a config known to be wrong here or "
        "tunes it again blindly. Fix the kernel, then tune again (tpu_kernels.autotune, or delete that "
        "entry); or pass the tunables yourself to run a config anyway."
    )


class TuningNote(UserWarning):
    """A tuned op ran a config other than an exact entry's (nearest, defaults), or a table was
    refused: said once per op, chip and reason."""


# ---- process state: tables read, overlays, the online tuner ----------------------------------

_LOCK = threading.Lock()
_LOADED: dict[str, dict[tables.Key, tables.Entry]] = {}  # op -> its entries, all files merged
_GENERATION = [0]  # bumped whenever what a lookup may find changes: memos compare it
_NOTED: set[tuple] = set()
_CHIP_NOTE = "chip"  # the reason of the note "no tuned config for chip ...": `Tuned._untuned_chip` reads it


class _Overlay:
    """One `with result:` block's entries by op (hashed by identity: a memo key part)."""

    __slots__ = ("entries",)

    def __init__(self, entries: Mapping[str, Mapping[tables.Key, tables.Entry]]) -> None:
        self.entries = entries


_OVERLAYS: contextvars.ContextVar[tuple[_Overlay, ...]] = contextvars.ContextVar(
    "tpu_kernels_tuning_overlays", default=()
)
_TUNED: dict[str, Tuned] = {}  # every op's lookup, by name (the traced path finds it by name)


def toolkit_version() -> str:
    from tpu_kernels._version import __version__

    return __version__


def version_order(version: str) -> tuple:
    """A sort key of a toolkit version: PEP 440's order (`packaging.version`) when packaging is
    installed, else the leading release numbers as ints (0.10.0 after 0.9.0), a release after
    its pre-releases ("0.2.0rc1" < "0.2.0"); text neither reads sorts first, by itself."""
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:
        return _plain_version_order(version)
    try:
        return (1, Version(version))
    except InvalidVersion:
        return (0, version)


def _plain_version_order(version: str) -> tuple:
    m = re.match(r"v?(\d+(?:\.\d+)*)(.*)", version.strip())
    if m is None:
        return (0, version)
    release = tuple(int(p) for p in m.group(1).split("."))
    release = release + (0,) * (8 - len(release))  # 1.0 == 1.0.0
    rest = m.group(2)
    return (1, release, not rest, rest)


def table_paths(op: str, home: Path | None) -> list[Path]:
    """Where the op's table files are looked for, first first: the tuning directory
    (`$TPU_KERNELS_TUNING_DIR`), then beside the module that defines the kernel (`home`)."""
    name = tables.filename(op)
    out = []
    env = os.environ.get(TUNING_DIR_ENV)
    if env:
        out.append(Path(env).expanduser() / name)
    if home is not None:
        out.append(home / name)
    return out


def write_path(op: str, home: Path | None) -> Path:
    """Where tuning writes the op's table: the tuning directory if set, else beside the kernel."""
    paths = table_paths(op, home)
    if not paths:
        raise ValueError(f"{op}: no place to write its tuning table; set {TUNING_DIR_ENV}.")
    return paths[0]


def reload() -> None:
    """Forget every table read so far: the next lookup of each op reads its files again."""
    with _LOCK:
        _LOADED.clear()
        _NOTED.clear()
        forget_printed()
        _GENERATION[0] += 1


def added(op: str, entries: Sequence[tables.Entry]) -> None:
    """Entries just written by this process (a tuning run): lookups see them at once."""
    with _LOCK:
        current = _LOADED.get(op)
        if current is not None:
            for e in entries:
                old = current.get(e.key)
                if not (old is not None and old.source != "predicted" and e.source == "predicted"):
                    current[e.key] = e
        _GENERATION[0] += 1


def push_overlay(entries: Mapping[str, Mapping[tables.Key, tables.Entry]]) -> contextvars.Token:
    """Entries by op that take precedence in this context (a `with TuningResult:` block)."""
    token = _OVERLAYS.set((*_OVERLAYS.get(), _Overlay(entries)))
    with _LOCK:
        _GENERATION[0] += 1
    return token


def pop_overlay(token: contextvars.Token) -> None:
    _OVERLAYS.reset(token)
    with _LOCK:
        _GENERATION[0] += 1


def note(op: str, chip: str, reason: str, text: str) -> None:
    """`text` as a TuningNote, once per (op, chip, reason)."""
    key = (op, chip, reason)
    if key in _NOTED:
        return
    _NOTED.add(key)
    warnings.warn(f"{op}: {text}", TuningNote, stacklevel=4)


def _loaded(op: str, paths: list[Path]) -> dict[tables.Key, tables.Entry]:
    got = _LOADED.get(op)
    if got is not None:
        return got
    merged: dict[tables.Key, tables.Entry] = {}
    for path in reversed(paths):  # the first path wins: read it last
        try:
            t = tables.read(path, op, _candidates(op))
        except tables.TuningTableError as e:
            note(op, "*", f"refused {path}", f"tuning table refused, running without it: {e}")
            continue
        if t is not None:
            merged.update(t.entries)
    with _LOCK:
        return _LOADED.setdefault(op, merged)


def _candidates(op: str) -> dict[str, list[Any]] | None:
    """Each tunable's declared values, for the exact-type check of a table's entries."""
    tuned = _TUNED.get(op)
    return None if tuned is None else tuned.tunables.space()


def entries_for(op: str, paths: list[Path]) -> dict[tables.Key, tables.Entry]:
    """Every entry a lookup of `op` may use: the overlays' (innermost first) over the tables'."""
    found = dict(_loaded(op, paths))
    for overlay in _OVERLAYS.get():
        found.update(overlay.entries.get(op, {}))
    return found


# ---- the choice ---------------------------------------------------------------------------------


def choose(
    entries: Mapping[tables.Key, tables.Entry], chip: str, dtypes: tuple, bucket: tuple, toolkit: str
) -> tuple[tables.Entry | None, str]:
    """The entry a call of (chip, dtypes, bucket) uses and how it was found: "exact",
    "failed" (the exact entry records that no candidate was right), "other-version", "nearest",
    or (None, "none"/"other-chip"). A failed entry is never borrowed for another key."""
    here = [e for e in entries.values() if e.chip == chip]
    if not here:
        return None, "other-chip" if entries else "none"
    exact = entries.get((chip, dtypes, bucket, toolkit))
    if exact is not None:
        return exact, "failed" if exact.source == "failed" else "exact"
    here = [e for e in here if e.source != "failed"]
    same = [e for e in here if e.dtypes == dtypes and e.bucket == bucket]
    if same:
        return max(same, key=lambda e: version_order(e.toolkit)), "other-version"
    near = [(d, e) for e in here if e.dtypes == dtypes and (d := distance(e.bucket, bucket)) is not None]
    if near:
        best = min(near, key=lambda de: (de[0], de[1].toolkit != toolkit, repr(de[1].bucket)))[1]
        return best, "nearest"
    return None, "none"


def distance(a: Any, b: Any) -> float | None:
    """Sum of |log2 ratio| over matching dims of two buckets; None when their structure differs
    (other ranks, other strings, a tensor present in one and absent in the other)."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        if len(a) != len(b):
            return None
        total = 0.0
        for x, y in zip(a, b):
            d = distance(x, y)
            if d is None:
                return None
            total += d
        return total
    if isinstance(a, bool) or isinstance(b, bool):
        return 0.0 if a == b else None
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if a == b:
            return 0.0
        if a <= 0 or b <= 0:
            return None
        return abs(math.log2(a) - math.log2(b))
    return 0.0 if a == b else None


# ---- one op ------------------------------------------------------------------------------------

_EMPTY: dict[str, Any] = {}


class Tuned:
    """One op's lookup: `fill(args, kwargs)` returns kwargs with the tunables the call left
    out, as its chip's table chooses them (or `kwargs` itself when nothing is tuned)."""

    def __init__(
        self,
        tunables: Tunables,
        signature: Any,
        home: Path | None,
        validate: Callable[[tuple, dict], None],
        online_target: Any = None,
        autocast: str = "keep",
    ) -> None:
        self.op_name = tunables.op
        self.signature = signature
        self.online_target = online_target  # what the online tuner is handed (the op)
        self.autocast = autocast  # the op's policy: under torch.autocast the kernel sees cast dtypes
        self.tunables = tunables
        self.home = home
        # (index, name, keyword-only) per tensor parameter: where a call passes its tensors
        self.tensor_slots = tuple(
            (i, p.name, p.keyword_only) for i, p in enumerate(signature.params) if p.is_tensor
        )
        self.slots = tuple(zip(tunables.names, tunables.slots))
        self.validate = validate
        self._memo: dict[tuple, Looked] = {}
        self._digests: dict[str, str | None] = {}  # traced arguments -> program digest
        self._memo_generation = -1  # the _GENERATION the memo and _live were computed at
        self._live = False  # some table or the online tuner may give this op a config
        # (the _GENERATION it was read at, the chips the op's tables have entries for): one
        # tuple, replaced whole, so a thread reads a set together with its generation
        self._chips: tuple[int, frozenset[str]] = (-1, frozenset())
        self._first_slot = self.tensor_slots[0] if self.tensor_slots else None
        _TUNED[self.op_name] = self

    def paths(self) -> list[Path]:
        return table_paths(self.op_name, self.home)

    # the hot path
    def fill(self, args: tuple, kwargs: dict) -> dict:
        if torch.compiler.is_compiling():
            return self._fill_traced(args, kwargs)
        if self._memo_generation != _GENERATION[0]:
            self._refresh()
        if not self._live and not _OVERLAYS.get():
            return kwargs  # no table holds an entry for this op, none is overlaid: the defaults
        if self._untuned_chip(args, kwargs):
            return kwargs
        given, tensors, first = self._call_parts(args, kwargs)
        if first is None:
            return kwargs
        chosen = self._looked(args, kwargs, given, tensors, first).fill
        return {**kwargs, **chosen} if chosen else kwargs

    def _untuned_chip(self, args: tuple, kwargs: dict) -> bool:
        """Whether the call certainly runs the declared defaults because its chip has no entry:
        what `_resolve` would conclude ("other-chip", its note already given), without building
        the memo key (its shapes, dtypes, autocast and precision): matmul's table holds only v5e
        entries, and a CPU call's `fill` then costs two environment reads and this check
        (bench/overhead.py's pieces). Only while nothing else could give the
        call a config or a line: no overlay (whose entries may name this chip), online tuning
        off (it would tune this key), no lookup printing (it prints each distinct lookup); and
        only once a full lookup has given the note, so that it is still said once per op and
        chip (and again after `reload`, which clears the notes given). A call whose first
        tensor parameter holds no tensor takes the full path."""
        slot = self._first_slot
        if slot is None:
            return False
        i, name, kw = slot
        t = kwargs.get(name) if kw or i >= len(args) else args[i]
        if not isinstance(t, torch.Tensor):
            return False  # None or a list: `_call_parts` finds the first tensor
        generation, chips = self._chips
        chip = "cpu" if type(t) is torch.Tensor and t.is_cpu else chip_of(t.device)  # a CPU tensor: no device query
        return (
            generation == _GENERATION[0]
            and chip not in chips
            and not _OVERLAYS.get()
            and (self.op_name, chip, _CHIP_NOTE) in _NOTED
            and os.environ.get(AUTOTUNE_ENV) != "1"
            and os.environ.get(PRINT_ENV) != "1"
        )

    def _looked(self, args: tuple, kwargs: dict, given: tuple, tensors: tuple, first: torch.Tensor) -> Looked:
        # the float32 matmul precision too: a kernel's trace reads it (matmul's VMEM need, hence
        # whether a tuned config fits, depends on its passes), and the lookup validates by a trace
        memo_key = (first.device, _metadata(tensors), given, _OVERLAYS.get(), self._autocast_state(first.device),
                    precision.current())
        looked = self._memo.get(memo_key)
        if looked is None:
            looked = self._resolve(args, kwargs, tensors, first.device, given)
            if len(self._memo) > 4096:
                self._memo.clear()
            self._memo[memo_key] = looked
            print_lookup(self.op_name, looked, self.tunables.describe(self._full(looked, given)))
        return looked

    def _full(self, looked: Looked, given: tuple) -> tuple:
        """Every tunable's value for the call: the caller's, the lookup's, else the default."""
        return tuple(
            looked.fill.get(n, g if g is not _MISSING else d)
            for (n, _), g, d in zip(self.slots, given, self.tunables.default)
        )

    def explain(self, args: tuple, kwargs: dict) -> TunedConfig:
        """Which config a call with these arguments would run with, and from which entry
        (`op.tuned_config`); the same lookup as the call's, notes and all."""
        if self._memo_generation != _GENERATION[0]:
            self._refresh()
        given, tensors, first = self._call_parts(args, kwargs)
        passed = tuple(n for (n, _), g in zip(self.slots, given) if g is not _MISSING)
        if first is None:  # every tunable passed (or no tensor): nothing is looked up
            how = "given" if passed else "defaults"
            looked = Looked(_EMPTY, how, None, "" if passed else "no tensor argument")
        elif not self._live and not _OVERLAYS.get():
            looked = Looked(_EMPTY, "defaults", None, "the op has no tuning entry", chip_of(first.device))
        else:
            looked = self._looked(args, kwargs, given, tensors, first)
        config = dict(zip(self.tunables.names, self._full(looked, given)))
        source = looked.entry.source if looked.entry is not None else looked.how
        bucket = looked.bucket or _plain(self._key(args, kwargs, tensors))
        return TunedConfig(
            self.op_name, config, source, looked.how, looked.chip, bucket, looked.entry, passed, looked.why
        )

    def _autocast_state(self, device: Any) -> Any:
        """What of torch.autocast changes the dtypes this op's kernel sees (a memo key part)."""
        if self.autocast == "keep" or not torch.is_autocast_enabled(device.type):
            return None
        return torch.get_autocast_dtype(device.type)

    def dtypes(self, tensors: tuple, device: Any) -> tuple:
        """The dtypes the kernel will run in: the tensors', or their casts under torch.autocast
        when the op's autocast policy casts (the lookup keys by these)."""
        under = dtype_under(self.autocast, device.type, tensors)
        return _dtypes(tensors, under)

    def _refresh(self) -> None:
        """After any change to what lookups may find (tables read or written, reload): forget
        the memo and find out again whether this op has entries at all, and for which chips
        (reading its tables)."""
        generation = _GENERATION[0]
        self._memo = {}
        self._digests = {}
        loaded = _loaded(self.op_name, self.paths())
        self._chips = (generation, frozenset(e.chip for e in loaded.values()))
        self._live = bool(loaded) or os.environ.get(AUTOTUNE_ENV) == "1"
        self._memo_generation = generation

    def _call_parts(self, args: tuple, kwargs: dict) -> tuple[tuple, tuple, Any]:
        """(each tunable's given value or _MISSING, the tensor arguments, the first tensor or
        None when every tunable is given or no tensor is)."""
        n = len(args)
        given = tuple(
            kwargs[name] if name in kwargs else (args[i] if not kw and i < n else _MISSING)
            for name, (i, kw) in self.slots
        )
        if _none_missing(given):
            return given, (), None
        tensors = tuple(kwargs.get(name) if kw or i >= n else args[i] for i, name, kw in self.tensor_slots)
        return given, tensors, _first_tensor(tensors)  # no tensor: the dispatcher's error

    def key_of(self, args: tuple, kwargs: dict) -> tuple[list, tuple, tuple]:
        """(the tensors' shapes, the dtypes the kernel runs in, the shape bucket) of a call:
        what its table entry is keyed by (the autotuner keys what it tunes the same way)."""
        n = len(args)
        tensors = tuple(kwargs.get(name) if kw or i >= n else args[i] for i, name, kw in self.tensor_slots)
        shapes = [list(t.shape) if isinstance(t, torch.Tensor) else None for t in tensors]
        first = _first_tensor(tensors)
        dtypes = self.dtypes(tensors, first.device) if first is not None else _dtypes(tensors)
        return shapes, dtypes, _plain(self._key(args, kwargs, tensors))

    def _key(self, args: tuple, kwargs: dict, tensors: tuple) -> tuple:
        fn = self.tunables.key
        if fn is None:
            return default_key(tensors)
        values = self.signature.bind(args, kwargs)
        named = {p.name: v for p, v in zip(self.signature.params, values)}
        return tuple(fn(**key_arguments(fn, named)))

    def _resolve(self, args: tuple, kwargs: dict, tensors: tuple, device: Any, given: tuple) -> Looked:
        op = self.op_name
        chip = chip_of(device)
        entries = entries_for(op, self.paths())
        dtypes = self.dtypes(tensors, device)
        bucket = _plain(self._key(args, kwargs, tensors))

        def defaults(why: str) -> Looked:
            return Looked(_EMPTY, "defaults", None, why, chip, dtypes, bucket)

        values = self.signature.bind(args, kwargs)
        entry, how = self.current(entries, chip, dtypes, bucket, values)
        if how not in ("exact", "failed") and os.environ.get(AUTOTUNE_ENV) == "1":
            tuned = self._tune_online(args, kwargs, chip)
            if tuned:
                entries = entries_for(op, self.paths())
                entry, how = self.current(entries, chip, dtypes, bucket, values)
        if how == "failed":
            shapes = [list(t.shape) if isinstance(t, torch.Tensor) else None for t in tensors]
            why = entry.evidence.get("why", "every candidate was wrong or failed")
            where = f"the op's tuning table ({', '.join(map(str, self.paths()))}), {entry.evidence.get('tuned_at', '')}"
            raise no_right_config(op, chip, shapes, bucket, why, where)
        if entry is None:
            if how == "other-chip":
                note(
                    op,
                    chip,
                    _CHIP_NOTE,
                    f"no tuned config for chip {chip!r} (the op's tables have entries for "
                    f"{', '.join(sorted({e.chip for e in entries.values()}))}); running the declared defaults "
                    f"({self.tunables.describe(self.tunables.default)}). Tune it here with tpu_kernels.autotune.",
                )
                return defaults(f"no entry for chip {chip!r}")
            if entries and any(e.chip == chip for e in entries.values()):
                note(
                    op,
                    chip,
                    f"none {dtypes}",
                    f"no tuned config for dtypes {list(dtypes)} on {chip!r}; "
                    f"running the declared defaults ({self.tunables.describe(self.tunables.default)}).",
                )
            return defaults(f"no entry for dtypes {list(dtypes)} on {chip!r}" if entries else "the op has no entry")
        config = self._config(entry, chip)
        if config is None:
            return defaults("the entry's config is not among the declared candidates")
        described = self.tunables.describe(self.tunables.config_of(config))
        if how != "exact":
            why = {
                "other-version": f"was tuned with tpu_kernels {entry.toolkit} (this is {toolkit_version()})",
                "nearest": f"has no entry for bucket {list(bucket)}: using the nearest, {list(entry.bucket)}",
            }[how]
            note(op, chip, f"{how} {bucket} {dtypes}", f"the {chip!r} table {why} ({described}).")
        fill = {name: config[name] for (name, _), g in zip(self.slots, given) if g is _MISSING}
        try:
            self.validate(args, {**kwargs, **fill})
        except Exception as e:  # the kernel refuses this config at this shape: the defaults
            note(
                op,
                chip,
                f"invalid {bucket} {_metadata(tensors)}",
                f"the tuned config {described} does not fit this call's shapes "
                f"({type(e).__name__}: {str(e).splitlines()[0][:200]}); running the declared defaults.",
            )
            return defaults(f"the tuned config {described} does not fit the call's shapes")
        if how == "nearest":
            wrong = self._borrow_check(args, {**kwargs, **fill})
            if wrong:
                note(
                    op,
                    chip,
                    f"borrowed {bucket} {_metadata(tensors)}",
                    f"the nearest entry's config {described} (bucket {list(entry.bucket)}) was checked at this "
                    f"call and is not right here ({wrong}); running the declared defaults. Tune this bucket.",
                )
                return defaults(f"the nearest entry's {described} is not right at this shape")
        return Looked(fill, how, entry, "", chip, dtypes, bucket)

    def current(
        self, entries: Mapping[tables.Key, tables.Entry], chip: str, dtypes: tuple, bucket: tuple, values: list
    ) -> tuple[tables.Entry | None, str]:
        """`choose`, passing over entries whose recorded program digest is not this kernel's
        (`values`: the call's, one per parameter; only its statics are read)."""
        entries = dict(entries)
        while True:
            entry, how = choose(entries, chip, dtypes, bucket, toolkit_version())
            if entry is None or self._program_matches(entry, values):
                return entry, how
            del entries[entry.key]

    def _program_matches(self, entry: tables.Entry, values: list) -> bool:
        """Does the entry's recorded program digest match the kernel's now? (True when the entry
        records none, or there is no op to trace.) A note says so once when it does not."""
        recorded = entry.evidence.get("program")
        if not isinstance(recorded, str) or self.online_target is None:
            return True
        digest = self.digest_of(entry.evidence.get("shape"), entry.dtypes, values, entry.config)
        if digest is None or digest == recorded:
            return True
        note(
            self.op_name,
            entry.chip,
            f"program {entry.key}",
            f"the tuning entry for {entry.chip} {list(entry.dtypes)} bucket {list(entry.bucket)} was tuned for "
            "another program of the kernel (its traced program's digest differs: the kernel or what it "
            "reads changed since); not served. Tune again.",
        )
        return False

    def digest_of(self, shapes: Any, dtypes: tuple, values: list, config: Mapping) -> str | None:
        """The digest of the kernel's program traced for an entry (`provenance` says how; `values`:
        the call's, one per parameter), memoized per process; None when it cannot be traced."""
        full = {n: config.get(n, d) for n, d in zip(self.tunables.names, self.tunables.default)}
        traced = digest_values(self.signature, self.tunables.names, values, shapes, dtypes, full)
        if traced is None or self.online_target is None:
            return None
        key = repr(traced)
        if key not in self._digests:
            params = self.signature.params
            pos = [v for p, v in zip(params, traced) if not p.keyword_only]
            kw = {p.name: v for p, v in zip(params, traced) if p.keyword_only}
            self._digests[key] = self.online_target.program_digest(*pos, **kw)
        return self._digests[key]

    def _borrow_check(self, args: tuple, kwargs: dict) -> str:
        """Why the borrowed config in `kwargs` is not right at this call ("" when it is, or
        when nothing can check it: no checker registered, or a tuning run is capturing calls)."""
        if recording.ACTIVE or self.online_target is None:
            return ""
        return wiring.hook("borrow_check")(self.online_target, args, kwargs)  # the tuner's (wiring.HOOKS)

    def _config(self, entry: tables.Entry, chip: str) -> dict[str, Any] | None:
        t = self.tunables
        unknown = sorted(set(entry.config) - set(t.names))
        config = {n: entry.config.get(n, d) for n, d in zip(t.names, t.default)}
        if unknown or t.config_of(config) not in t.configs:
            note(
                self.op_name,
                chip,
                f"stale {entry.key}",
                f"a tuning entry's config {dict(entry.config)} is not "
                f"among the op's declared candidates now ({t.describe(t.default)} ...); ignored. Tune again.",
            )
            return None
        return config

    def _tune_online(self, args: tuple, kwargs: dict, chip: str) -> bool:
        return bool(wiring.hook("online_tuner")(self.online_target, args, kwargs))  # the tuner's (wiring.HOOKS)

    def _fill_traced(self, args: tuple, kwargs: dict) -> dict:
        """Under torch.compile: the same choice, made at trace time and kept as constants."""
        given, tensors, first = self._call_parts(args, kwargs)
        if first is None:
            return kwargs
        device = first.device
        chip = _chip_constant(device.type if device.index is None else str(device))
        if not _has_entries(self.op_name, chip):
            return kwargs
        dtypes = self.dtypes(tensors, device)
        bucket = _plain(self._key(args, kwargs, tensors))
        statics = tuple(
            None if p.is_tensor else v for p, v in zip(self.signature.params, self.signature.bind(args, kwargs))
        )
        index = _traced_config(self.op_name, chip, dtypes, bucket, statics)
        if index is None:
            return kwargs
        if index == -1:
            shapes = [list(t.shape) if isinstance(t, torch.Tensor) else None for t in tensors]
            where = f"the op's tuning table ({', '.join(map(str, self.paths()))})"
            raise no_right_config(self.op_name, chip, shapes, bucket, "every candidate was wrong or failed", where)
        # the config read from the op's own declaration by index: values that Dynamo can guard on
        # (it cannot take type() of a value assume_constant_result returned, as the range check does)
        config = self.tunables.configs[index]
        fill = {name: v for (name, _), g, v in zip(self.slots, given, config) if g is _MISSING}
        return {**kwargs, **fill}


_MISSING = object()


def _none_missing(given: tuple) -> bool:
    """Whether every tunable was given: an identity test, element by element. Not
    `_MISSING not in given`, whose `==` on the sentinel object torch 2.13's Dynamo cannot
    trace under torch.compile(fullgraph=True) ("Missing richcompare_impl override")."""
    for g in given:
        if g is _MISSING:
            return False
    return True


def _first_tensor(tensors: tuple) -> torch.Tensor | None:
    for t in tensors:
        if isinstance(t, torch.Tensor):
            return t
        if isinstance(t, (list, tuple)):
            for x in t:
                if isinstance(x, torch.Tensor):
                    return x
    return None


def _metadata(tensors: tuple) -> tuple:
    return tuple(
        (t.shape, t.dtype)
        if isinstance(t, torch.Tensor)
        else (tuple((x.shape, x.dtype) for x in t) if isinstance(t, (list, tuple)) else None)
        for t in tensors
    )


def _dtypes(tensors: tuple, under: Callable[[Any], Any] | None = None) -> tuple:
    def name(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            return str(under(t) if under is not None else t.dtype).removeprefix("torch.")
        if isinstance(t, (list, tuple)):
            return tuple(name(x) for x in t)
        return None

    return tuple(name(t) for t in tensors)


def _plain(v: Any) -> Any:
    """A key with torch.Size and SymInt-free ints made plain tuples and ints (JSON's shapes)."""
    if isinstance(v, (tuple, list)):
        return tuple(_plain(x) for x in v)
    if isinstance(v, torch.SymInt):
        return int(v)
    return v


@_compat.assume_constant_result
def _chip_constant(device: str) -> str:
    return chip_of(torch.device(device))


# Under torch.compile these run at trace time on constants (the op's name, the chip, the key)
# and their results enter the graph as constants: Dynamo never traces the table reads.
@_compat.assume_constant_result
def _has_entries(op: str, chip: str) -> bool:
    return any(e.chip == chip for e in entries_for(op, _TUNED[op].paths()).values())


@_compat.assume_constant_result
def _traced_config(op: str, chip: str, dtypes: tuple, bucket: tuple, statics: tuple) -> int | None:
    """The index of the chosen config in the op's declared candidates, None for the defaults,
    -1 when the entry records that no candidate is right. `statics`: the call's value of each
    parameter, None for tensors (the program digest's statics)."""
    tuned = _TUNED[op]
    entry, _ = tuned.current(entries_for(op, tuned.paths()), chip, dtypes, bucket, list(statics))
    if entry is None:
        return None
    if entry.source == "failed":
        return -1  # no candidate is right here: the caller raises
    config = tuned._config(entry, chip)
    return None if config is None else tuned.tunables.configs.index(tuned.tunables.config_of(config))


def iter_entries(op: str, home: Path | None) -> Iterator[tables.Entry]:
    """The entries the op's tables hold now (read fresh; for reports and the CLI)."""
    merged: dict[tables.Key, tables.Entry] = {}
    for path in reversed(table_paths(op, home)):
        t = tables.read(path, op, _candidates(op))
        if t is not None:
            merged.update(t.entries)
    yield from merged.values()
