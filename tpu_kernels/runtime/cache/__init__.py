"""Compiled kernels, kept so that each is built once: in the process, and on disk across processes.

- `memory.py`: the in-process tier, one compiled callable per key (`CompileCache`), per op
  and device;
- on disk (docs/caching.md), in `directory()` (default `~/.cache/tpu-kernels/kernels`, or
  `$XDG_CACHE_HOME/tpu-kernels/kernels`; `TPU_KERNELS_CACHE_DIR` moves it, `=off` turns it
  off): each kernel's XLA executable, one folder per host kind, so a new process traces
  the kernel (milliseconds) and neither lowers nor compiles it.
  - `program.py`: the key, a digest of the traced program (never of the Python source);
  - `entry.py`: the file format, which carries its key and a checksum;
  - `store.py`: the directory, its trust model, bounded reads, atomic writes, the event log;
  - `build.py`: one build, loading or compiling and storing.

Only the CPU path with the fast interpreter uses the disk (the TPU-semantics interpreter
runs host callbacks, which a stored executable cannot carry); on a TPU kernels run through
torch_tpu, which compiles them itself.
"""

from tpu_kernels.runtime.cache.memory import CacheInfo, CompileCache
from tpu_kernels.runtime.cache.store import (
    ENV,
    STATS,
    TRUST_ENV,
    CacheDirError,
    clear,
    default_directory,
    directory,
    info,
)

__all__ = [
    "ENV",
    "STATS",
    "TRUST_ENV",
    "CacheDirError",
    "CacheInfo",
    "CompileCache",
    "clear",
    "default_directory",
    "directory",
    "info",
]
