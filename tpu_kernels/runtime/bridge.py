"""torch <-> JAX without copies.

Tensors cross by DLPack. The public `jax.dlpack.from_dlpack` costs about ten times
the two C entry points underneath (torch's `_to_dlpack`, JAX's
`dlpack_managed_tensor_to_buffer`), almost all of it Python checks (the figures:
`python bench/overhead.py`; docs/performance.md, "Per-call overhead"). We call those
(through tpu_kernels/_compat.py), and fall back to the public functions
if a future release moves them (`LOW_LEVEL` says which path is live).

On CPU two more savings. `ViewCache` remembers the JAX view of a tensor object
for as long as that object lives, so weights and other tensors passed call
after call are imported once. The view aliases the tensor's memory, so later
in-place writes to the tensor are seen by the kernel; a tensor whose storage, dtype,
shape or strides changed (`.data =`, `set_`, `resize_`) is imported again.
A tensor seen once (a fresh activation) crosses as a NumPy view instead
(`host_view`): a jitted function takes NumPy arguments in its C++ path, aliasing
their memory, for about half the cost of a DLPack import in a real call.

Neither route changes anything about the caller's tensor. The NumPy view is
built from the data pointer (`__array_interface__`), not with `t.numpy()`,
which marks the tensor's storage non-resizable for good (FSDP2 frees parameter
storage with `resize_(0)` and then fails); the view's base holds the tensor, so
its memory lives as long as JAX may read the view. The two routes give a jitted
function different argument types (a NumPy array, a committed `jax.Array`);
`devices.cpu` gives the jit an explicit CPU sharding so both reach one executable.

Both routes alias the tensor's memory when its data pointer is aligned (torch's
allocations are); JAX copies a misaligned view (such as `x[1:]` of a 1-D
float32 tensor) on the way in, as it does for any host buffer.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import jax
import numpy as np
import torch

from tpu_kernels import _compat, cpu_client

# private, fast entry points (tpu_kernels/_compat.py); checked by tests/test_bridge.py
_LOW_LEVEL_NAMES = ("jax_dlpack_import", "jax_dlpack_export", "torch_to_dlpack", "torch_from_dlpack")
LOW_LEVEL = _compat.all_of(*_LOW_LEVEL_NAMES)
if LOW_LEVEL:
    _import_capsule, _export_capsule, _torch_to_capsule, _torch_from_capsule = map(
        _compat.get, _LOW_LEVEL_NAMES
    )

_CPU_DEVICE: jax.Device | None = None


def cpu_device() -> jax.Device:
    """JAX's CPU device; the first call may make JAX's CPU client (synchronous: cpu_client.py)."""
    global _CPU_DEVICE
    if _CPU_DEVICE is None:
        cpu_client.synchronous()
        _CPU_DEVICE = jax.devices("cpu")[0]
    return _CPU_DEVICE


def c_strided(t: torch.Tensor) -> torch.Tensor:
    """`t`, or a view of its memory with C-order strides where a size-1 dim's stride is not
    (a contiguous tensor's size-1 dims may have any stride: [8, 1] from `randn(1, 8).t()` has
    (1, 8)). JAX's DLPack import reads the strides as a layout, so (1, 8) arrives column-major,
    and an executable compiled for the row-major layout (one from the disk cache, say) refuses
    it at run time. The view changes nothing about `t`. Only a contiguous tensor is re-viewed
    (its elements are in C order whatever its size-1 strides); any other is returned as it is."""
    if not t.is_contiguous():
        return t
    shape, strides = t.shape, t.stride()
    want, step = [], 1
    for size in reversed(shape):
        want.append(step)
        step *= size
    want.reverse()
    if tuple(want) == strides:
        return t
    return t.as_strided(shape, want)


def to_jax_cpu(t: torch.Tensor) -> jax.Array:
    """A contiguous CPU tensor -> a JAX array sharing its memory."""
    if t.requires_grad:
        t = t.detach()
    if 1 in t.shape:
        t = c_strided(t)
    if LOW_LEVEL:
        return _import_capsule(_torch_to_capsule(t), cpu_device(), None)
    cpu_client.synchronous()
    return jax.dlpack.from_dlpack(t)


# NumPy's array-interface type string of each dtype NumPy holds natively;
# bfloat16 and the float8 types cross by DLPack
_TYPESTR: dict[torch.dtype, str] = {
    dt: np.dtype(npdt).str
    for dt, npdt in {
        torch.float64: np.float64,
        torch.float32: np.float32,
        torch.float16: np.float16,
        torch.int64: np.int64,
        torch.int32: np.int32,
        torch.int16: np.int16,
        torch.int8: np.int8,
        torch.uint8: np.uint8,
        torch.bool: np.bool_,
    }.items()
}


class _HostMemory:
    """The base of a `host_view`: its memory's description, and the tensor that owns it.

    NumPy keeps an array's base alive as long as the array, and JAX keeps a NumPy
    argument alive until the call that reads it is done, so the tensor (and its
    storage) outlives every read through the view.
    """

    __slots__ = ("__array_interface__", "tensor")


def host_view(t: torch.Tensor) -> np.ndarray | jax.Array:
    """A contiguous CPU tensor -> an argument for one jitted call, sharing its memory.

    A NumPy view where NumPy has the dtype (the jitted call imports it in C++,
    zero-copy), else a DLPack import. Only for a call that finishes before the
    tensor can change: JAX treats a NumPy argument as immutable while it runs.
    The view is built from the data pointer rather than by `t.numpy()`, which
    would mark `t`'s storage non-resizable for good; this costs a little more per
    tensor (bench/overhead.py's pieces time it).
    """
    typestr = _TYPESTR.get(t.dtype)
    if typestr is None:
        return to_jax_cpu(t)
    mem = _HostMemory()
    mem.tensor = t
    # No strides: a contiguous tensor's layout is C order (size-1 dims aside, whose
    # strides do not matter).
    mem.__array_interface__ = {
        "data": (t.data_ptr(), False),
        "shape": t.shape,
        "typestr": typestr,
        "version": 3,
    }
    return np.asarray(mem)


def to_torch_cpu(a: jax.Array) -> torch.Tensor:
    """A JAX CPU array -> a torch tensor sharing its memory (waits until it is ready)."""
    if LOW_LEVEL:
        return _torch_from_capsule(_export_capsule(a, stream=None))
    return torch.from_dlpack(a)


class CachedView:
    """A tensor's cached JAX view, and the tensor as it was when viewed: its weak reference,
    data pointer, shape, strides and dtype. The view is the tensor's while all five still hold
    (`holds`: `ViewCache.get` asks it, and so does eager.py's shortcut, which reads
    `ViewCache.views`)."""

    __slots__ = ("__weakref__", "array", "dtype", "ptr", "ref", "shape", "stride")

    def __init__(self, t: torch.Tensor, ref: weakref.ref, array: jax.Array) -> None:
        self.ref, self.array = ref, array
        self.ptr, self.shape, self.stride, self.dtype = t.data_ptr(), t.shape, t.stride(), t.dtype

    def holds(self, t: torch.Tensor) -> bool:
        """Whether the view is still `t`'s: the same object, memory, shape, strides and dtype."""
        return (
            self.ref() is t
            and self.ptr == t.data_ptr()
            and self.shape == t.shape
            and self.stride == t.stride()
            and self.dtype is t.dtype
        )


class ViewCache:
    """tensor object -> its JAX view, for tensors passed again and again (weights).

    A tensor is cached the second time it is seen (same object, same memory):
    caching costs a weak reference and a detached alias, more than a one-off view
    (bench/overhead.py's pieces), which tensors seen once - fresh activations - should not pay. A one-off
    tensor costs a dict entry in a bounded table of recent sightings.

    Cached entries (`views`: id -> CachedView) are keyed by `id(tensor)`, with a weak
    reference whose callback drops the entry when the tensor dies (before its id can be
    reused); the view (which holds the tensor's storage through its DLPack capsule) dies
    with the entry. A hit costs one dict lookup and four attribute reads (data pointer,
    shape, strides, dtype) to catch a tensor whose memory or type was swapped under the
    object (`.data =`, `set_`, `resize_`). Only a view that aliases the tensor's memory
    is cached: JAX copies a misaligned tensor on the way in, and a cached copy would
    miss the tensor's later in-place writes. `hits` and `misses` count `get`'s calls.
    """

    RECENT = 4096  # sightings remembered, to spot the second one

    def __init__(self) -> None:
        self.views: dict[int, CachedView] = {}
        self._recent: dict[int, tuple] = {}  # id -> (weak ref, data pointer) at the first sighting
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, t: torch.Tensor) -> jax.Array | np.ndarray:
        """An argument for one jitted call on `t`: its cached view, or a one-off `host_view`."""
        key = id(t)
        entry = self.views.get(key)
        if entry is not None and entry.holds(t):
            self.hits += 1
            return entry.array
        self.misses += 1
        ptr = t.data_ptr()
        if entry is None:
            # A second sighting is the same live object at the same memory: a weak
            # reference, not the id alone, since a fresh activation often gets a dead
            # one's id and memory (the allocators recycle both), and caching every such
            # tensor cost more than the call it serves (a fresh view of one tensor paid
            # the caching path on every call: bench/overhead.py's rotating case).
            seen = self._recent.get(key)
            if seen is None or seen[1] != ptr or seen[0]() is not t:
                self._recent[key] = (weakref.ref(t), ptr)
                if len(self._recent) > self.RECENT:
                    self._recent.pop(next(iter(self._recent)), None)
                return host_view(t)  # seen once so far: not cached
        # Import a detached alias: the capsule then holds a tensor of its own (same
        # storage), not `t`'s TensorImpl, which would keep `t`'s Python object alive
        # (torch preserves it while C++ holds the impl) and this entry with it, forever.
        view = to_jax_cpu(t.detach())
        with self._lock:
            self._recent.pop(key, None)
            if view.unsafe_buffer_pointer() != ptr:  # a copy (misaligned): never cached
                self.views.pop(key, None)
                return view
            ref = weakref.ref(t, lambda _, key=key, views=self.views: views.pop(key, None))
            self.views[key] = CachedView(t, ref, view)
        return view

    def clear(self) -> None:
        with self._lock:
            self.views.clear()
            self._recent.clear()

    def __len__(self) -> int:
        return len(self.views)


VIEWS = ViewCache()


def to_jax_cuda(t: torch.Tensor) -> jax.Array:
    """A CUDA tensor -> a JAX GPU array, ordered after the current torch stream.

    The public `jax.dlpack.from_dlpack` negotiates streams through the DLPack
    protocol: JAX asks torch to make JAX's stream wait for torch's current one.
    """
    if t.requires_grad:
        t = t.detach()
    if 1 in t.shape:
        t = c_strided(t)
    cpu_client.synchronous()  # JAX makes every client at once, the CPU one too
    return jax.dlpack.from_dlpack(t)


def to_torch_cuda(a: jax.Array) -> torch.Tensor:
    """A JAX GPU array -> a torch tensor, ordered before work on torch's current stream."""
    return torch.from_dlpack(a)


def describe(values: Any) -> str:
    """'f32[8,128]'-style summary of tensors and arrays, for error messages."""
    if isinstance(values, (list, tuple)):
        return "[" + ", ".join(describe(v) for v in values) + "]"
    if isinstance(values, torch.Tensor):
        return f"{str(values.dtype).removeprefix('torch.')}{list(values.shape)}@{values.device}"
    if isinstance(values, (jax.Array, jax.ShapeDtypeStruct, np.ndarray)):
        return f"{values.dtype}{list(values.shape)}"
    return repr(values)
