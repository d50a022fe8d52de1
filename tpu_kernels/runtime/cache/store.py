"""Where on-disk entries live, who may have written them, and how they are read and written.

The directory holds executable programs: whoever can write it can make every process that
uses it run code of their choosing. So a directory (or one of its folders, or an entry) that
another user owns, or that others can write, is not used unless the user says it is trusted
(`TPU_KERNELS_CACHE_TRUST=shared`, for a fleet's shared directory, which still refuses
anything writable by everyone); docs/caching.md states this model. `clear` never leaves the
directory: a link planted in it is removed, not followed. Entries are read with a bound (the size their header states, at most
`MAX_ENTRY_BYTES`), never through a symlink, and only if they are regular files; they are
written to a temporary file and renamed, so readers see a whole entry or none.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fnmatch
import functools
import hashlib
import os
import platform
import stat
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

from tpu_kernels.runtime.cache import entry

ENV = "TPU_KERNELS_CACHE_DIR"
TRUST_ENV = "TPU_KERNELS_CACHE_TRUST"
MAX_ENTRY_BYTES = 512 << 20  # a kernel's executable is KiB to a few MiB; anything larger is not ours
_MAX_LOG_BYTES = 64 << 20
_SUFFIX = ".tkexe"
_STATS_FILE = "stats.log"
_TIER = "executables"
_LEGACY = ("exports", "xla-*")  # format 1's folders (jax.export modules, JAX's own cache)


class CacheDirError(ValueError):
    """A cache directory that cannot be inspected or cleared (not a folder, unreadable)."""


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


@functools.cache
def host() -> str:
    """`cpu-<hash>`: XLA's CPU executables are compiled for this host's instruction set, so
    hosts of a fleet that differ in it keep apart. The host is named by its CPU model and
    feature flags (/proc/cpuinfo) and machine type."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = {ln.strip() for ln in f if ln.startswith(("model name", "flags", "Features", "CPU part"))}
    except OSError:
        lines = set()
    lines.add(platform.machine())
    return "cpu-" + hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()[:12]


def entry_path(root: Path, key: str) -> Path:
    return root / _TIER / host() / (key + _SUFFIX)


# ---- trust -----------------------------------------------------------------------------
def shared_trusted() -> bool:
    return os.environ.get(TRUST_ENV, "").strip().lower() == "shared"


def owner_problem(path: Path, st: os.stat_result) -> str | None:
    if st.st_mode & 0o002:  # trusted or not: "shared" names a group of accounts, never everyone
        return f"{path} is writable by everyone (mode {stat.filemode(st.st_mode)}){_shared_note()}"
    if shared_trusted():
        return None
    if st.st_uid != os.geteuid():
        return f"{path} belongs to another user (uid {st.st_uid})"
    if st.st_mode & 0o020 and not _private_group(st.st_gid):
        return f"{path} is writable by its group (mode {stat.filemode(st.st_mode)}, gid {st.st_gid})"
    return None


def _shared_note() -> str:
    """Said after a world-writable path when the user trusts shared directories."""
    return f", which {TRUST_ENV}=shared does not allow either" if shared_trusted() else ""


def _private_group(gid: int) -> bool:
    """A group of this user alone (a "user private group", where umask 002 is usual)."""
    try:
        import grp
        import pwd

        group = grp.getgrgid(gid)
        return (
            gid == os.getegid() and not group.gr_mem and group.gr_name == pwd.getpwuid(os.geteuid()).pw_name
        )
    except (ImportError, KeyError):
        return False


def untrusted(root: Path) -> str | None:
    """Why `root` must not be used, or None. Checks the directory and the folders below it
    that entries live in, and that no folder above it lets another user replace it."""
    for ancestor in list(root.resolve().parents)[::-1]:
        with contextlib.suppress(OSError):
            st = os.stat(ancestor)
            sticky = st.st_mode & stat.S_ISVTX
            if st.st_mode & 0o002 and not sticky:  # anyone may replace the directory: trusted or not
                return f"{ancestor}, above the cache directory, is writable by everyone{_shared_note()}"
    for path in (root, root / _TIER, root / _TIER / host()):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        except OSError as e:
            return f"{path} cannot be read ({e.strerror})"
        if not stat.S_ISDIR(st.st_mode):
            return f"{path} is not a directory"
        problem = owner_problem(path, st)
        if problem:
            return problem
    return None


_warned: set[str] = set()
_warn_lock = threading.Lock()


def usable(root: Path) -> bool:
    """Whether entries may be read from and written to `root`; warns once per reason."""
    reason = untrusted(root)
    if reason is None:
        return True
    with _warn_lock:
        first = reason not in _warned
        _warned.add(reason)
    if first:
        fix = (
            "Give write access only to a group of the accounts you trust (chmod o-w)"
            if shared_trusted()
            else f"Make it yours and not writable by others (chmod go-w), or set {TRUST_ENV}=shared "
            f"if it is a shared cache you trust"
        )
        warnings.warn(
            f"tpu_kernels: not using the on-disk kernel cache at {root}: {reason}. Whoever can "
            f"write a kernel cache can run code in every process that uses it. {fix} "
            f"(docs/caching.md). Kernels are compiled in this process instead.",
            RuntimeWarning,
            stacklevel=4,
        )
    count(root, "untrusted", "-", log=False)
    return False


# ---- reading and writing ---------------------------------------------------------------
def read(path: Path) -> bytes | None:
    """The bytes of the entry at `path`, None if there is none; Rejected if it is not a
    regular file of ours of the size its header states."""
    flags = (
        os.O_RDONLY
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_CLOEXEC", 0)
    )
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise entry.Rejected("a symlink (entries are never read through links)") from e
        raise entry.Rejected(f"cannot be opened ({e.strerror})") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise entry.Rejected("not a regular file")
        problem = owner_problem(path, st)
        if problem:
            raise entry.Rejected(problem)
        if st.st_size > MAX_ENTRY_BYTES:
            raise entry.Rejected(f"{st.st_size} bytes, over the {MAX_ENTRY_BYTES} an entry may have")
        prefix = _read_exactly(fd, min(st.st_size, entry.prefix_size()))
        size = entry.expected_size(prefix)
        if size != st.st_size or size > MAX_ENTRY_BYTES:
            raise entry.Rejected(f"{st.st_size} bytes, but its header says {size}")
        return prefix + _read_exactly(fd, size - len(prefix))
    finally:
        os.close(fd)


def _read_exactly(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise entry.Rejected("shorter than it was a moment ago (being rewritten?)")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, then rename: readers see all or nothing,
    and concurrent writers of one key each rename a whole file (the last one wins). A bad
    file at `path` (a link, a foreign entry) is replaced, not written through."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)  # never group-writable
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


def evict(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


# ---- statistics ------------------------------------------------------------------------
@dataclasses.dataclass
class Stats:
    """This process's on-disk cache events."""

    hits: int = 0  # an executable loaded from disk: traced, neither lowered nor compiled
    misses: int = 0  # no usable entry: lowered, compiled, stored
    writes: int = 0
    rejected: int = 0  # an entry that failed a check (corrupt, foreign, a link, too large), rebuilt
    evicted: int = 0  # an entry that loaded but failed at run time: removed, rebuilt
    uncacheable: int = 0  # builds whose program cannot be keyed or stored (cache.program)
    untrusted: int = 0  # builds that skipped a directory others can write (cache.store.usable)


STATS = Stats()
_stats_lock = threading.Lock()


def count(root: Path, event: str, op: str, *, log: bool = True) -> None:
    with _stats_lock:
        setattr(STATS, event, getattr(STATS, event) + 1)
    if not log:
        return
    # One short line appended per event (events happen once per kernel and process, not
    # per call): O_APPEND writes this small are atomic, so processes sharing the
    # directory keep one log without locks. `tpu-kernels cache info` sums it.
    with contextlib.suppress(OSError):
        root.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd = os.open(
            root / _STATS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644
        )
        try:
            os.write(fd, f"{event} {op}\n".encode())
        finally:
            os.close(fd)


# ---- inspection (tpu-kernels cache info / clear) ------------------------------------------
def _checked_root(root: Path) -> None:
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return
    except OSError as e:
        raise CacheDirError(f"{root}: cannot read it ({e.strerror})") from e
    if not stat.S_ISDIR(st.st_mode):
        raise CacheDirError(f"{root} is not a directory")
    if not os.access(root, os.R_OK | os.X_OK):
        raise CacheDirError(f"{root}: cannot read it (permission denied)")


def _is_folder(path: Path) -> bool:
    """A folder itself, not a link to one (links planted in the directory are never followed)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _files(folder: Path) -> list[Path]:
    if not _is_folder(folder):
        return []
    try:
        with os.scandir(folder) as it:
            return [
                folder / e.name
                for e in it
                if e.is_file(follow_symlinks=False) and not e.name.startswith(".tmp-")
            ]
    except FileNotFoundError:
        return []
    except OSError as e:
        raise CacheDirError(f"{folder}: cannot read it ({e.strerror})") from e


def _legacy_dirs(root: Path) -> list[Path]:
    return [d for pattern in _LEGACY for d in sorted(root.glob(pattern)) if _is_folder(d)]


def info(root: Path) -> dict[str, Any]:
    """Entries and bytes (this host's, all hosts', format 1's), and the events logged by
    every process that used the directory. CacheDirError for a path that is not one."""
    _checked_root(root)
    out: dict[str, Any] = {"directory": str(root), "process": dataclasses.asdict(STATS)}
    tier = root / _TIER
    hosts = [d for d in sorted(tier.glob("*")) if _is_folder(d)] if _is_folder(tier) else []
    here = _files(tier / host()) if hosts else []
    every = [p for d in hosts for p in _files(d)]
    legacy = [p for d in _legacy_dirs(root) for p in _files(d)]
    out["this_host"] = {"entries": len(here), "bytes": sum(p.stat().st_size for p in here), "host": host()}
    out["all_hosts"] = {
        "entries": len(every),
        "bytes": sum(p.stat().st_size for p in every),
        "hosts": len(hosts),
    }
    out["legacy"] = {"entries": len(legacy), "bytes": sum(p.stat().st_size for p in legacy)}
    out["untrusted"] = untrusted(root)
    events: dict[str, int] = {}
    ops: dict[str, dict[str, int]] = {}
    with contextlib.suppress(OSError, entry.Rejected):
        text = _read_log(root / _STATS_FILE)
        for line in text.splitlines():
            event, _, op = line.partition(" ")
            events[event] = events.get(event, 0) + 1
            ops.setdefault(op, {})[event] = ops.setdefault(op, {}).get(event, 0) + 1
    out["logged"] = events
    out["ops"] = ops
    return out


def _read_log(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise entry.Rejected("the log is not a regular file")
        return os.read(fd, _MAX_LOG_BYTES).decode(errors="replace")
    finally:
        os.close(fd)


def clear(root: Path) -> int:
    """Delete every entry (every host's, and format 1's) and the event log; returns the
    files removed. CacheDirError for a path that is not a directory or cannot be read.

    It never leaves `root`: each folder is opened without following links and emptied
    through its own descriptor, and a link found where a folder or an entry belongs (which
    another user of a shared or world-writable directory could plant, pointing anywhere) is
    removed itself, never followed."""
    _checked_root(root)
    try:
        root_fd = os.open(root, _DIR_FLAGS)  # `root` is the user's choice: a link to it is fine
    except FileNotFoundError:
        return 0
    try:
        removed = 0
        for name in _names(root_fd, root):
            if name == _TIER:
                removed += _empty(root_fd, root, name, depth=1)  # its folders, one per host
            elif any(fnmatch.fnmatchcase(name, pattern) for pattern in _LEGACY):
                removed += _empty(root_fd, root, name, depth=0)
        removed += _unlink(root_fd, root, _STATS_FILE)
        return removed
    finally:
        os.close(root_fd)


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


def _names(fd: int, where: Path) -> list[str]:
    try:
        return os.listdir(fd)
    except OSError as e:
        raise CacheDirError(f"{where}: cannot read it ({e.strerror})") from e


def _unlink(dir_fd: int, where: Path, name: str) -> int:
    """Remove the file or link `name` of the open folder `dir_fd`: 1, or 0 if it is gone."""
    try:
        os.unlink(name, dir_fd=dir_fd)
        return 1
    except FileNotFoundError:
        return 0
    except OSError as e:
        raise CacheDirError(f"{where / name}: cannot delete it ({e.strerror})") from e


def _empty(parent_fd: int, parent: Path, name: str, depth: int) -> int:
    """Remove the files and links in the folder `name` of `parent_fd` and, `depth` levels
    down, in its folders; a link where the folder belongs is removed, not followed."""
    try:
        st = os.lstat(name, dir_fd=parent_fd)
    except FileNotFoundError:
        return 0
    if stat.S_ISLNK(st.st_mode):
        return _unlink(parent_fd, parent, name)
    if not stat.S_ISDIR(st.st_mode):
        return 0  # a file where a folder belongs: not an entry, left alone
    where = parent / name
    try:  # O_NOFOLLOW: a folder swapped for a link since the lstat is refused, not followed
        fd = os.open(name, _DIR_FLAGS | getattr(os, "O_NOFOLLOW", 0), dir_fd=parent_fd)
    except FileNotFoundError:
        return 0
    except OSError as e:
        raise CacheDirError(f"{where}: cannot open it as a folder ({e.strerror})") from e
    try:
        removed = 0
        for child in _names(fd, where):
            try:
                folder = stat.S_ISDIR(os.lstat(child, dir_fd=fd).st_mode)
            except FileNotFoundError:
                continue
            if not folder:
                removed += _unlink(fd, where, child)
            elif depth > 0:
                removed += _empty(fd, where, child, depth - 1)
        return removed
    finally:
        os.close(fd)


__all__ = [
    "ENV",
    "MAX_ENTRY_BYTES",
    "STATS",
    "TRUST_ENV",
    "CacheDirError",
    "Stats",
    "clear",
    "default_directory",
    "directory",
    "entry_path",
    "info",
    "read",
    "untrusted",
    "usable",
    "write_atomic",
]
