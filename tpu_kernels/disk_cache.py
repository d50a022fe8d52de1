"""The on-disk kernel cache: a new process skips tracing, lowering and the XLA compile.

Three tiers hold a kernel (docs/caching.md):

1. in-process: `cache.CompileCache`, one compiled callable per key, per executor;
2. on disk, in `directory()` (default `~/.cache/tpu-kernels/kernels`, or
   `$XDG_CACHE_HOME/tpu-kernels/kernels`; `TPU_KERNELS_CACHE_DIR` overrides it,
   `TPU_KERNELS_CACHE_DIR=off` turns tiers 2 and 3 off):
   - `exports/`: each kernel lowered once, as the StableHLO module of a
     `jax.export.Exported`, with what is needed to call it again (avals, calling
     convention); a later process deserializes it and calls it through
     `Exported.call` inside a `jax.jit`, so nothing is traced or lowered again;
   - `xla-<host>/`: JAX's own persistent compilation cache, for the XLA compile of
     that call, one folder per CPU model and instruction set (`xla_subdir`). tpu_kernels points JAX at it only around its own compiles, and only when
     the user has not set `jax_compilation_cache_dir` (then JAX's cache is theirs,
     with their thresholds);
3. a shared directory (a fleet): point `TPU_KERNELS_CACHE_DIR` at it; entries
   are written to a temporary file and renamed, so readers never see half a file.

An entry's key (`Kernel.name`: a `Kernel` is what one build compiles) is a SHA-256
over: this file format, the Python, jax, jaxlib and tpu_kernels versions, the code
that wraps kernels (`_toolkit`), the kernel function's digest (`fingerprint.digest`:
code, closure, defaults, globals), the op's name, the device platform and its version, the interpreter
mode, the matmul precision, statics, shapes and dtypes, 64-bit mode and JAX's
trace-affecting settings (`jax._src.config.trace_context`). An op whose function
cannot be digested is not cached on disk (counted as `uncacheable`).

A file is trusted only if its magic, its length, its SHA-256 and the key stored
inside all match; anything else (truncated, flipped bytes, another key's file,
another format) is counted as `rejected`, rebuilt and rewritten.

Only the CPU path uses it (the fast interpreter; the TPU-semantics interpreter
runs host callbacks, which an export cannot carry). On a TPU, kernels run
through torch_tpu (`devices/tpu.py`), which does its own compiling.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax

from tpu_kernels import _compat, fingerprint

jax_config = _compat.get("jax_config")

ENV = "TPU_KERNELS_CACHE_DIR"
FORMAT = 1
MAGIC = b"TPUKEXP1"  # 8 bytes; then the payload's SHA-256 (32 bytes), then the payload
_SUFFIX = ".jaxexp"
_STATS_FILE = "stats.log"


# ---- where -----------------------------------------------------------------------------
def default_directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tpu-kernels" / "kernels"


def directory() -> Path | None:
    """The cache directory now (read at each build, so a test or a user can switch), or None: off."""
    value = os.environ.get(ENV)
    if value is None or value == "":
        return default_directory()
    if value.strip().lower() in ("off", "0", "false", "none", "disabled"):
        return None
    return Path(value).expanduser()


# ---- statistics ------------------------------------------------------------------------
@dataclasses.dataclass
class Stats:
    """This process's on-disk cache events."""

    hits: int = 0  # a kernel loaded from disk: no tracing, no lowering
    misses: int = 0  # no usable entry: traced, lowered, stored
    writes: int = 0
    rejected: int = 0  # an entry that failed a check (corrupt, truncated, foreign), rebuilt
    uncacheable: int = 0  # builds of ops that cannot be cached on disk (see fingerprint)


STATS = Stats()
_stats_lock = threading.Lock()


def _count(root: Path, event: str, op: str) -> None:
    with _stats_lock:
        setattr(STATS, event, getattr(STATS, event) + 1)
    # One short line appended per event (events happen once per kernel and process, not
    # per call): O_APPEND writes this small are atomic, so processes sharing the
    # directory keep one log without locks. `tpu-kernels cache info` sums it.
    with contextlib.suppress(OSError):
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / _STATS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{event} {op}\n".encode())
        finally:
            os.close(fd)


# ---- keys ------------------------------------------------------------------------------
_toolkit_digest: str | None = None


def _toolkit() -> str:
    """The digest of tpu_kernels' own source (its version does not change while it is
    developed): every module, since the code that wraps, traces and stores a kernel spans
    several of them and names module-level state (locks) that no code digest can walk.
    Any edit of the package invalidates every entry: safe, at the price of a rebuild."""
    global _toolkit_digest
    if _toolkit_digest is None:
        h = hashlib.sha256()
        package = Path(__file__).resolve().parent
        for path in sorted(package.rglob("*.py")):
            h.update(str(path.relative_to(package)).encode())
            h.update(path.read_bytes())
        _toolkit_digest = h.hexdigest()
    return _toolkit_digest


def _trace_settings() -> str | None:
    """JAX's settings that change what a trace produces (what jit keys its own caches on);
    None when one cannot be read reliably (a mesh or axis context is active)."""
    names = jax_config.trace_context_names()
    parts = []
    for name, value in zip(names, jax_config.trace_context()):
        if isinstance(value, _compat.get("AxisEnv")):
            if value.axis_sizes or value.spmd_axis_names or value.explicit_mesh_axis_names:
                return None
            value = "empty-axis-env"
        elif type(value) is object:
            # A bare object() is a "not set" sentinel (Tokamax's config options, made with
            # jax.make_user_context, default to one): it means the same in every process,
            # and without this, importing Tokamax turned the on-disk cache off everywhere.
            value = "sentinel"
        parts.append((name, value))
    return fingerprint.digest(tuple(parts))


def _versions() -> tuple:
    import jaxlib

    import tpu_kernels

    return (sys.version, jax.__version__, jaxlib.__version__, tpu_kernels.__version__)


def _layout(layout: Any) -> tuple:
    """How the op passes arguments and takes results: (signature, results expected). The
    function's annotations decide them but are not part of its code."""
    if layout is None:
        return ()
    sig, n_results = layout
    params = tuple((p.name, p.kind.value, p.schema_type, p.keyword_only) for p in sig.params)
    return (params, sig.n_outputs, sig.returns_tuple, n_results)


@dataclasses.dataclass(frozen=True)
class Kernel:
    """What one build compiles, as the on-disk cache tells builds apart: every field is in
    the entry's name (`name()`), and `single` also decides the stored results' structure."""

    fn: Callable  # the kernel function: its code digest (fingerprint.digest)
    op: str  # the op's name
    device_type: str  # the torch device type; the entry holds the platform and its version
    key: tuple  # the in-process cache key: (interpreter mode, matmul precision, statics, shapes...)
    x64: bool  # traced in JAX's 64-bit mode
    single: bool  # the jitted function returns the array itself, not a tuple
    layout: Any = None  # (signature, results expected): how the op passes arguments and results

    def name(self) -> str | None:
        """The entry's name, or None when this kernel must not be cached on disk."""
        fn_digest = fingerprint.digest(self.fn)
        if fn_digest is None:
            return None
        key_digest = fingerprint.digest(self.key)
        settings = _trace_settings()
        if key_digest is None or settings is None:
            return None
        device = jax.devices(self.device_type)[0]
        material = (
            FORMAT,
            _versions(),
            _toolkit(),
            fn_digest,
            self.op,
            device.platform,
            device.client.platform_version,
            key_digest,
            self.x64,
            self.single,
            settings,
            _layout(self.layout),
        )
        return hashlib.sha256(repr(material).encode()).hexdigest()


def entry_key(*fields: Any, **named: Any) -> str | None:
    """`Kernel(*fields, **named).name()`: the entry's name for one build, or None."""
    return Kernel(*fields, **named).name()


# ---- the file format -------------------------------------------------------------------
def _aval(a: Any) -> list:
    return [list(a.shape), str(a.dtype), bool(getattr(a, "weak_type", False))]


def encode(key: str, op: str, exp: jax.export.Exported) -> bytes:
    meta = {
        "format": FORMAT,
        "key": key,
        "op": op,
        "fun_name": exp.fun_name,
        "in_tree": str(exp.in_tree),
        "in_avals": [_aval(a) for a in exp.in_avals],
        "out_tree": str(exp.out_tree),
        "out_avals": [_aval(a) for a in exp.out_avals],
        "platforms": list(exp.platforms),
        "calling_convention_version": exp.calling_convention_version,
        "module_kept_var_idx": list(exp.module_kept_var_idx),
    }
    meta_bytes = json.dumps(meta, sort_keys=True).encode()
    payload = len(meta_bytes).to_bytes(4, "little") + meta_bytes + exp.mlir_module_serialized
    return MAGIC + hashlib.sha256(payload).digest() + payload


class Rejected(Exception):
    """An entry that fails a check; never used."""


def decode(data: bytes, key: str, in_tree: Any, single: bool) -> jax.export.Exported:
    """The Exported stored in `data`, if every check passes; else Rejected."""
    if len(data) < 44 or data[:8] != MAGIC:
        raise Rejected("no tpu_kernels export header")
    digest, payload = data[8:40], data[40:]
    if hashlib.sha256(payload).digest() != digest:
        raise Rejected("checksum mismatch (truncated or corrupted)")
    n = int.from_bytes(payload[:4], "little")
    try:
        meta = json.loads(payload[4 : 4 + n])
    except ValueError as e:
        raise Rejected(f"unreadable metadata: {e}") from e
    if meta.get("format") != FORMAT or meta.get("key") != key:
        raise Rejected("another key's or another format's entry")
    out_tree = _out_tree(single, len(meta["out_avals"]))
    if meta["in_tree"] != str(in_tree) or meta["out_tree"] != str(out_tree):
        raise Rejected("argument or result structure differs")
    try:
        return _rebuild(meta, payload[4 + n :], in_tree, out_tree)
    except _compat.CompatError as e:  # pragma: no cover - a JAX that changed Exported: compile instead
        raise Rejected(str(e)) from e


def _avals(rows: list) -> tuple:
    return tuple(jax.core.ShapedArray(tuple(s), jax.numpy.dtype(d), weak_type=w) for s, d, w in rows)


def _rebuild(meta: dict, module: bytes, in_tree: Any, out_tree: Any) -> Any:
    """The Exported that `encode` stored (what `storable` admits: one device, no shardings)."""
    return _compat.make_exported(
        fun_name=meta["fun_name"],
        in_tree=in_tree,
        in_avals=_avals(meta["in_avals"]),
        out_tree=out_tree,
        out_avals=_avals(meta["out_avals"]),
        in_shardings_hlo=(None,) * len(meta["in_avals"]),
        out_shardings_hlo=(None,) * len(meta["out_avals"]),
        nr_devices=1,
        platforms=tuple(meta["platforms"]),
        ordered_effects=(),
        unordered_effects=(),
        disabled_safety_checks=(),
        mlir_module_serialized=module,
        calling_convention_version=meta["calling_convention_version"],
        module_kept_var_idx=tuple(meta["module_kept_var_idx"]),
        uses_global_constants=False,
    )


def _out_tree(single: bool, n: int) -> Any:
    """The executor's result structure: the array itself, or a tuple of n arrays."""
    return jax.tree_util.tree_structure(0 if single else (0,) * n)


def storable(exp: jax.export.Exported) -> bool:
    """Only what `decode` rebuilds exactly: one device, no shardings, effects or dimension variables."""
    return (
        exp.nr_devices == 1
        and not exp.ordered_effects
        and not exp.unordered_effects
        and not exp.disabled_safety_checks
        and not exp.uses_global_constants
        and all(s is None for s in (*exp.in_shardings_hlo, *exp.out_shardings_hlo))
        and all(s is None for s in (*exp._in_named_shardings, *exp._out_named_shardings))
    )


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, then rename: readers see all or nothing,
    and concurrent writers of one key each rename a whole file (the last one wins)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a shared directory needs readers
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ---- JAX's compilation cache, scoped to our compiles --------------------------------------
@contextlib.contextmanager
def xla_cache(root: Path) -> Iterator[None]:
    """JAX's persistent compilation cache in root/xla, for the compiles inside only.

    Left alone when the user configured JAX's cache (`jax_compilation_cache_dir`) or
    disabled it (`jax_enable_compilation_cache=False`). The thresholds are lowered
    inside only: our kernels compile in 0.05-0.2 s, under JAX's default 1 s minimum.
    JAX opens its cache once per process, at the first compile that has a directory:
    if that is ours, a directory the user sets later is not used (a JAX limit)."""
    if jax_config.compilation_cache_dir.value is not None or not jax_config.enable_compilation_cache.value:
        yield
        return
    xla_dir = str(root / xla_subdir())
    _reopen_if_moved(xla_dir)
    with (
        jax_config.compilation_cache_dir(xla_dir),
        jax_config.persistent_cache_min_compile_time_secs(0.0),
        jax_config.persistent_cache_min_entry_size_bytes(-1),
    ):
        yield


_xla_dir: str | None = None


@functools.cache
def xla_subdir() -> str:
    """`xla-<host>`: XLA's CPU executables are compiled for this host's instruction set,
    so hosts of a fleet that differ in it keep apart (the exports, plain StableHLO, are
    shared). The host is named by its CPU model and feature flags (/proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = {ln.strip() for ln in f if ln.startswith(("model name", "flags", "Features", "CPU part"))}
    except OSError:
        lines = set()
    import platform

    lines.add(platform.machine())
    return "xla-" + hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()[:12]


def _tier_dirs(root: Path, tier: str) -> list[Path]:
    return [root / "exports"] if tier == "exports" else sorted(root.glob("xla-*"))


def _reopen_if_moved(path: str) -> None:
    """JAX opens its cache once per process; when our directory changed since (a test, a
    user switching TPU_KERNELS_CACHE_DIR), close it so the next compile opens `path`.
    Only reached while the user has no JAX cache directory of their own."""
    global _xla_dir
    if _xla_dir == path:
        return
    compilation_cache = _compat.get("jax_compilation_cache")
    if _xla_dir is not None and getattr(compilation_cache, "_cache_initialized", False):
        compilation_cache.reset_cache()
    _xla_dir = path


# ---- LAPACK set-up ---------------------------------------------------------------------
# Lowering an Exported for the CPU first initialises JAX's LAPACK bindings, which imports
# scipy.linalg: 0.6-1.0 s on our loaded 2-core machine, once per process, more than the
# rest of a warm first call. Kernels whose module calls no LAPACK routine do not need it;
# their Exported gets a `platforms` tuple registered here, for which the initialisation
# is skipped. Any other Exported (and any JAX without this function) is unaffected.
_NO_LAPACK: dict[int, tuple] = {}


def _install_lapack_skip() -> bool:
    _export = _compat.get("jax_export_internals")
    if _export is None:  # pragma: no cover - depends on JAX's internals
        return False
    original = getattr(_export, "_ensure_backends_initialized", None)
    if original is None:  # pragma: no cover
        return False
    if getattr(original, "_tpu_kernels", False):
        return True

    def ensure_backends_initialized(platforms: tuple[str, ...]) -> None:
        if _NO_LAPACK.get(id(platforms)) is platforms:
            return
        original(platforms)

    ensure_backends_initialized._tpu_kernels = True  # type: ignore[attr-defined]
    _export._ensure_backends_initialized = ensure_backends_initialized
    return True


def _maybe_skip_lapack(exp: jax.export.Exported) -> jax.export.Exported:
    if b"lapack" in exp.mlir_module_serialized or not _install_lapack_skip():
        return exp
    platforms = tuple(exp.platforms)
    _NO_LAPACK[id(platforms)] = platforms  # kept alive, so the id stays this tuple's
    return dataclasses.replace(exp, platforms=platforms)


# ---- the build --------------------------------------------------------------------------
def _compiled(exp: jax.export.Exported, arrays: list[Any], in_shardings: Any = None) -> Callable:
    # the same argument shardings as the plain build: NumPy views and cached DLPack views
    # then reach one executable (tests/test_bridge.py counts compiles)
    fn = jax.jit(
        _maybe_skip_lapack(exp).call, **({} if in_shardings is None else {"in_shardings": in_shardings})
    )
    fn.lower(*arrays).compile()
    return fn


def build(
    jitted: Callable,
    arrays: list[Any],
    kernel: Kernel,
    *,
    in_shardings: Any = None,
    exportable: Callable | None = None,
) -> Callable:
    """A compiled jitted callable for `kernel`: loaded from disk, or built and stored.

    `jitted` is the kernel's jitted wrapper, compiled for `arrays`; `in_shardings` the
    argument shardings `jitted` pins, which a module loaded from disk is jitted with too;
    `exportable` the same function jitted without them (what is stored: a module without
    shardings). The entry's name is made only when the cache is on, and only for the CPU's
    fast interpreter (`kernel.key[0] is True`). Problems with the cache itself never
    surface: a kernel that fails to export or to load is built as without the cache."""
    root = directory()
    if root is None:
        jitted.lower(*arrays).compile()
        return jitted
    op = kernel.op
    with xla_cache(root):
        name = None
        if kernel.device_type == "cpu" and kernel.key[0] is True:
            try:
                name = kernel.name()
            except Exception:  # noqa: BLE001 - a key we cannot make is an uncached build
                name = None
        if name is None:
            _count(root, "uncacheable", op)
            jitted.lower(*arrays).compile()
            return jitted
        path = root / "exports" / (name + _SUFFIX)
        loaded = _load(root, path, name, kernel, arrays, in_shardings)
        if loaded is not None:
            return loaded
        _count(root, "misses", op)
        specs = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), arrays)
        platform = jax.devices(kernel.device_type)[0].platform
        try:
            exp = jax.export.export(exportable or jitted, platforms=[platform])(*specs)
        except Exception:  # noqa: BLE001 - not exportable: the plain build raises real errors
            jitted.lower(*arrays).compile()
            return jitted
        if not storable(exp) or exp.out_tree != _out_tree(kernel.single, len(exp.out_avals)):
            jitted.lower(*arrays).compile()
            return jitted
        with contextlib.suppress(OSError):
            write_atomic(path, encode(name, op, exp))
            _count(root, "writes", op)
        try:
            return _compiled(exp, arrays, in_shardings)
        except Exception:  # noqa: BLE001
            jitted.lower(*arrays).compile()
            return jitted


def _load(
    root: Path, path: Path, name: str, kernel: Kernel, arrays: list[Any], in_shardings: Any
) -> Callable | None:
    """The entry at `path`, compiled for `arrays`, if it passes `decode`'s checks; else None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        in_tree = jax.tree_util.tree_structure((tuple(arrays), {}))
        exp = decode(data, name, in_tree, kernel.single)
        fn = _compiled(exp, arrays, in_shardings)
    except Exception:  # noqa: BLE001 - Rejected, or a module that no longer loads
        _count(root, "rejected", kernel.op)
        return None
    _count(root, "hits", kernel.op)
    return fn


# ---- inspection (tpu-kernels cache info / clear) ------------------------------------------
def info(root: Path | None = None) -> dict[str, Any]:
    """Entries and bytes per tier, and the events logged by every process that used it."""
    root = root if root is not None else directory()
    out: dict[str, Any] = {"directory": str(root) if root else None, "process": dataclasses.asdict(STATS)}
    if root is None:
        return out
    for tier in ("exports", "xla"):
        files = [
            p
            for d in _tier_dirs(root, tier)
            for p in d.glob("*")
            if p.is_file() and not p.name.startswith(".tmp-")
        ]
        out[tier] = {"entries": len(files), "bytes": sum(p.stat().st_size for p in files)}
    events: dict[str, int] = {}
    ops: dict[str, dict[str, int]] = {}
    with contextlib.suppress(OSError):
        for line in (root / _STATS_FILE).read_text(errors="replace").splitlines():
            event, _, op = line.partition(" ")
            events[event] = events.get(event, 0) + 1
            ops.setdefault(op, {})[event] = ops.setdefault(op, {}).get(event, 0) + 1
    out["logged"] = events
    out["ops"] = ops
    return out


def clear(root: Path | None = None) -> int:
    """Delete every entry of both tiers and the event log; returns the files removed."""
    root = root if root is not None else directory()
    if root is None:
        return 0
    removed = 0
    for tier in ("exports", "xla"):
        for p in (q for d in _tier_dirs(root, tier) for q in d.glob("*")):
            if p.is_file():
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
                    removed += 1
    with contextlib.suppress(FileNotFoundError):
        (root / _STATS_FILE).unlink()
        removed += 1
    return removed


__all__ = ["ENV", "STATS", "Kernel", "build", "clear", "default_directory", "directory", "entry_key", "info"]
