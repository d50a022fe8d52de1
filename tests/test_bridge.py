"""torch <-> JAX by DLPack: zero copy, and the per-tensor view cache stays correct."""

import contextlib
import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from tests.helpers import rand
from tpu_kernels import tpu_kernel
from tpu_kernels.runtime import bridge


def test_the_low_level_dlpack_entry_points_are_in_use():
    assert bridge.LOW_LEVEL  # if JAX or torch moved them, the public (slower) path runs instead


def test_inputs_and_outputs_share_memory():
    t = rand(64, 128)
    a = bridge.to_jax_cpu(t)
    assert a.unsafe_buffer_pointer() == t.data_ptr()
    out = jax.jit(lambda x: x * 2)(a)
    back = bridge.to_torch_cpu(out)
    assert back.data_ptr() == out.unsafe_buffer_pointer()
    torch.testing.assert_close(back, t * 2)


def test_view_cache_caches_a_tensor_seen_twice_and_sees_in_place_writes():
    cache = bridge.ViewCache()
    t = rand(16)
    cache.get(t)
    assert len(cache) == 0  # seen once: not cached (fresh activations should not pay for it)
    first = cache.get(t)
    assert len(cache) == 1 and cache.get(t) is first and (cache.hits, cache.misses) == (1, 2)
    t.add_(1)  # the view aliases the tensor's memory
    torch.testing.assert_close(torch.from_dlpack(first), t)


def test_view_cache_does_not_cache_a_new_tensor_at_a_dead_ones_id_and_memory(monkeypatch):
    # fresh views of one tensor: each new object often gets the dead one's id (CPython
    # reuses it) and always its data pointer; none is the same tensor seen twice, and
    # caching each cost more than the call it served
    cache = bridge.ViewCache()
    imports = []  # the cached route's DLPack imports
    real = bridge.to_jax_cpu  # an aliasing import: only such a view is cached
    monkeypatch.setattr(bridge, "to_jax_cpu", lambda t: imports.append(t) or real(t))
    base = rand(16)
    ids = set()
    for _ in range(50):
        v = base.view(16)
        ids.add(id(v))
        cache.get(v)
        del v
    assert len(ids) < 50  # the ids were recycled, so the weak reference is what tells them apart
    assert imports == [] and cache.misses == 50  # every one crossed as a one-off view
    same = base.view(16)
    cache.get(same)
    cache.get(same)  # the same live object again: cached
    assert len(cache) == 1 and len(imports) == 1


def test_view_cache_reimports_a_tensor_whose_memory_changed():
    cache = bridge.ViewCache()
    t = rand(16)
    cache.get(t)
    cache.get(t)  # cached now
    t.data = rand(16)  # same object, new storage
    view = cache.get(t)
    assert view.unsafe_buffer_pointer() == t.data_ptr() and cache.misses == 3
    t.resize_(4, 4)  # same storage, new shape
    assert cache.get(t).shape == (4, 4) and cache.misses == 4


def test_view_cache_reimports_a_tensor_whose_dtype_changed_over_the_same_memory():
    cache = bridge.ViewCache()
    t = rand(4, 4)
    cache.get(t)
    cache.get(t)  # cached
    t.data = t.data.view(torch.int32)  # same object, memory, shape and strides; another dtype
    assert cache.get(t).dtype == jnp.int32 and cache.misses == 3


def test_view_cache_never_caches_a_copy_of_a_misaligned_tensor():
    """The cache's side of test_a_misaligned_tensor_is_never_served_a_stale_cached_copy: a
    view JAX copied is never kept, so a later get sees the tensor's in-place writes."""
    t = rand(1025)[1:]  # 4 bytes past an aligned allocation
    assert bridge.to_jax_cpu(t).unsafe_buffer_pointer() != t.data_ptr()  # JAX's own copy
    cache = bridge.ViewCache()
    for _ in range(3):  # seen, then seen again: when an aligned tensor would be cached
        cache.get(t)
    assert len(cache) == 0
    t.mul_(3)
    torch.testing.assert_close(torch.from_dlpack(cache.get(t)), t)


def test_view_cache_entries_die_with_their_tensors():
    cache = bridge.ViewCache()
    for _ in range(5):
        t = rand(8)
        cache.get(t)
        cache.get(t)  # cached
        del t
    assert len(cache) == 0  # each temporary tensor is gone, and its entry with it
    keep = rand(8)
    cache.get(keep)
    cache.get(keep)
    assert len(cache) == 1


def test_tensors_that_require_grad_cross_detached():
    t = rand(4, requires_grad=True)
    assert bridge.to_jax_cpu(t).unsafe_buffer_pointer() == t.data_ptr()


def test_a_tensor_seen_once_crosses_as_a_numpy_view_of_its_memory():
    for dtype in (torch.float32, torch.float64, torch.int64, torch.uint8, torch.bool):
        t = rand(8, 16).to(dtype)
        v = bridge.host_view(t)
        assert v.__array_interface__["data"][0] == t.data_ptr()
        assert str(v.dtype) == str(t.dtype).removeprefix("torch.")
    b = rand(8, 16, dtype=torch.bfloat16)  # NumPy has no bfloat16: DLPack
    assert bridge.host_view(b).unsafe_buffer_pointer() == b.data_ptr()
    g = rand(4, requires_grad=True)
    assert bridge.host_view(g).__array_interface__["data"][0] == g.data_ptr()


def test_every_dtype_gives_the_same_result_through_either_route():
    # first call: one-off views; third call: cached views of the same tensors
    f = jax.jit(lambda x, y: (x + y, x * y))
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int16):
        x, y = rand(8, 16, scale=40).to(dtype), rand(8, 16, scale=40).to(dtype)  # ints: not just 0 and +-1
        cache = bridge.ViewCache()
        with jax.enable_x64(dtype == torch.float64):
            fresh = [bridge.to_torch_cpu(r) for r in f(cache.get(x), cache.get(y))]
            cache.get(x), cache.get(y)
            cached = [bridge.to_torch_cpu(r) for r in f(cache.get(x), cache.get(y))]
        assert len(cache) == 2
        for a, b, want in zip(fresh, cached, (x + y, x * y)):
            assert a.dtype == dtype
            torch.testing.assert_close(a, want, rtol=0, atol=0)
            torch.testing.assert_close(b, want, rtol=0, atol=0)


# ---- a call leaves the caller's tensors as they came ----------------------------------


@tpu_kernel("test_bridge::scaled_sum")
def scaled_sum(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * 2 + w


def _state(t: torch.Tensor) -> dict:
    """Everything about a tensor a call could change, storage resizability aside."""
    return {
        "requires_grad": t.requires_grad,
        "is_leaf": t.is_leaf,
        "grad_fn": t.grad_fn,
        "version": t._version,
        "dict": dict(t.__dict__),
        "data_ptr": t.data_ptr(),
        "shape": t.shape,
        "stride": t.stride(),
        "storage_nbytes": t.untyped_storage().nbytes(),
    }


def _assert_storage_resizable(t: torch.Tensor) -> None:
    # FSDP2 frees a parameter's memory this way between uses, and later re-allocates it.
    storage = t.untyped_storage()
    nbytes = storage.nbytes()
    storage.resize_(0)
    assert storage.nbytes() == 0
    storage.resize_(nbytes)
    assert storage.nbytes() == nbytes


@pytest.mark.parametrize("route", ["eager shortcut", "dispatcher"])
def test_calls_leave_tensors_as_they_came_on_both_routes(route):
    x = rand(8, 128)
    w = torch.nn.Parameter(rand(8, 128))
    w.tag = "kept"  # a Python attribute of the caller's
    before = {"x": _state(x), "w": _state(w)}
    call = scaled_sum if route == "eager shortcut" else scaled_sum.overload
    ctx = torch.no_grad() if route == "eager shortcut" else contextlib.nullcontext()
    want = x * 2 + w.detach()
    with ctx:
        outs = [call(x, w) for _ in range(3)]  # 1st: first sighting (NumPy view); 2nd, 3rd: cached
    for out in outs:
        torch.testing.assert_close(out.detach(), want, rtol=0, atol=0)
    assert bridge.VIEWS.get(x) is bridge.VIEWS.get(x)  # the cached route was taken
    assert {"x": _state(x), "w": _state(w)} == before
    assert w.tag == "kept" and type(w) is torch.nn.Parameter
    _assert_storage_resizable(x)
    _assert_storage_resizable(w)
    # and the op still computes right on the re-allocated memory (cache re-imports it)
    with torch.no_grad():
        x.copy_(rand(8, 128)), w.copy_(rand(8, 128))
        torch.testing.assert_close(call(x, w).detach(), x * 2 + w, rtol=0, atol=0)


def test_a_host_view_leaves_the_storage_resizable_for_every_numpy_dtype():
    for dtype in (torch.float64, torch.float32, torch.float16, torch.int64, torch.int8, torch.bool):
        t = rand(4, 8).to(dtype)
        view = bridge.host_view(t)
        np.testing.assert_array_equal(view, t.clone().numpy())  # a clone: its own storage
        del view
        _assert_storage_resizable(t)


def test_a_host_view_keeps_its_tensor_alive_until_jax_is_done_with_it():
    t = torch.arange(1024, dtype=torch.float32)
    alive = weakref.ref(t)
    view = bridge.host_view(t)
    del t
    gc.collect()
    assert alive() is not None  # the view's base holds the tensor, so its memory stays valid
    out = jax.jit(lambda a: a + 1)(view)
    del view
    gc.collect()
    np.testing.assert_array_equal(np.asarray(out), np.arange(1, 1025, dtype=np.float32))
    assert alive() is None  # and nothing keeps it longer than the views


def test_empty_and_zero_dim_tensors_cross_as_host_views():
    for t in (torch.empty(0, 5), torch.tensor(3.0)):
        v = bridge.host_view(t)
        assert v.shape == tuple(t.shape) and v.dtype == np.float32
    assert float(bridge.host_view(torch.tensor(3.0))) == 3.0


# ---- one executable whichever route a tensor crosses by (issue 12) ---------------------


@contextlib.contextmanager
def _count_compiles():
    """Counts JAX lowerings to MLIR and XLA compiles while inside."""
    from jax._src import dispatch

    counts = {"lower": 0, "compile": 0}

    def listen(event: str, duration: float, **kwargs) -> None:
        if event == dispatch.JAXPR_TO_MLIR_MODULE_EVENT:
            counts["lower"] += 1
        elif event == dispatch.BACKEND_COMPILE_EVENT:
            counts["compile"] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield counts
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


@tpu_kernel("test_bridge::compile_once")
def compile_once(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return jnp.tanh(x) * w


@pytest.mark.parametrize("disk_cache", ["off", "on"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_one_compile_across_first_sighting_cached_and_fresh_tensors(dtype, disk_cache, monkeypatch, tmp_path):
    # float32/float64 cross first as NumPy views, then as cached jax.Arrays; bfloat16 by
    # DLPack both times; float64 under x64. Each must reach one executable, also with the
    # on-disk cache on (an empty one here: the build lowers and compiles once, and stores it).
    monkeypatch.setenv("TPU_KERNELS_CACHE_DIR", "off" if disk_cache == "off" else str(tmp_path))
    x, w = rand(16, 128, dtype=dtype), rand(16, 128, dtype=dtype)
    want = torch.tanh(x) * w
    compile_once.cache_clear()
    with _count_compiles() as counts:
        with torch.no_grad():
            first = compile_once(x, w)  # first sighting: one-off views
            cached = [compile_once(x, w) for _ in range(2)]  # second: cached; third: cache hit
            fresh = compile_once(x.clone(), w.clone())  # new tensor objects
        via_dispatcher = compile_once.overload(x.clone(), w)  # the dispatcher's route
    assert counts == {"lower": 1, "compile": 1}
    for out in (first, *cached, fresh, via_dispatcher):
        assert out.dtype == dtype
        torch.testing.assert_close(out, want)
    info = compile_once.cache_info()
    assert info.misses == 1


def _doubled_op(name: str):
    from tpu_kernels import tpu_kernel

    @tpu_kernel(f"test_bridge_views::{name}")
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    return double


def test_a_misaligned_tensor_is_never_served_a_stale_cached_copy():
    """JAX copies a tensor whose data pointer it cannot alias (here 4 bytes past a 64-byte
    boundary): a cached copy would miss the tensor's later in-place writes."""
    double = _doubled_op("misaligned")
    x = torch.randn(1025)[1:]
    assert x.data_ptr() % 16
    for _ in range(3):  # a second sighting would cache its view
        torch.testing.assert_close(double(x), x * 2, rtol=0, atol=0)
    x.add_(torch.rand(1024) + 0.5)
    torch.testing.assert_close(double(x), x * 2, rtol=0, atol=0)


def test_a_tensor_whose_dtype_changed_under_the_same_object_is_viewed_again():
    double = _doubled_op("dtype_swap")
    y = torch.arange(256, dtype=torch.float32).reshape(2, 128) + 0.5
    for _ in range(3):
        double(y)
    y.data = y.data.view(torch.int32)  # same object, memory, shape and strides; another dtype
    out = double(y)
    assert out.dtype == torch.int32
    torch.testing.assert_close(out, y * 2, rtol=0, atol=0)


@pytest.mark.parametrize("make", [
    lambda: rand(1, 8).t(),  # [8, 1], strides (1, 8): contiguous to torch
    lambda: rand(4, 1, 3).transpose(0, 1),  # [1, 4, 3], strides (3, 3, 1)
    lambda: rand(1, 16).reshape(1, 16)[:, :],
    lambda: rand(3, 16)[1:2].t(),  # [16, 1], strides (1, 16), at a storage offset (64 bytes: JAX copies an unaligned one)
])
def test_size_one_dims_arrive_row_major_whatever_their_stride(make):
    """JAX reads DLPack strides as a layout: [8, 1] with strides (1, 8) would arrive
    column-major, and an executable compiled for the row-major layout (the disk cache's)
    refuses it at run time. The import re-views such a tensor; the caller's is untouched."""
    t = make()
    strides = t.stride()
    assert t.is_contiguous()
    a = bridge.to_jax_cpu(t)
    assert a.format.layout.major_to_minor == tuple(range(t.ndim))
    assert a.unsafe_buffer_pointer() == t.data_ptr()  # a view, not a copy
    assert t.stride() == strides
    np.testing.assert_array_equal(np.asarray(a), t.numpy())


def test_an_executable_from_the_disk_cache_runs_a_column_whose_size_one_dim_has_another_stride(tmp_path):
    """Two processes share a kernel cache: the first compiles rmsnorm's forward and backward at
    [8, 1] from a tensor with strides (1, 1); the second calls them with a [8, 1] of strides
    (1, 8). Before, the loaded executables refused its layout, were evicted and compiled again,
    with a warning, in every process that alternated the two."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    code = (
        "import sys, warnings, torch\n"
        "warnings.simplefilter('error', RuntimeWarning)\n"
        "from tpu_kernels.kernels import rmsnorm\n"
        "torch.manual_seed(0)\n"
        "x = torch.randn(8, 1) if sys.argv[1] == 'plain' else torch.randn(1, 8).t()\n"
        "x.requires_grad_()\n"
        "w = torch.randn(1, requires_grad=True)\n"
        "rmsnorm(x, w, eps=1e-5).sum().backward()\n"
        "print(x.stride(), float(x.grad.abs().sum()))\n"
    )
    env = {**os.environ, "TPU_KERNELS_CACHE_DIR": str(tmp_path), "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(root)}
    for kind in ("plain", "transposed"):
        out = subprocess.run([sys.executable, "-c", code, kind], capture_output=True, text=True, env=env,
                             timeout=240, cwd=root)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "evicted" not in out.stderr


def test_a_noncontiguous_tensor_is_never_reviewed_as_c_order():
    # c_strided re-views only contiguous tensors: a column slice [4, 1] of a [4, 3] has stride
    # (3, 1), and C-order strides (1, 1) over its memory would read the wrong elements
    t = rand(4, 3)[:, 1:2]
    assert not t.is_contiguous()
    assert bridge.c_strided(t) is t
    c = rand(1, 8).t()
    v = bridge.c_strided(c)
    assert v.stride() == (1, 1) and v.data_ptr() == c.data_ptr() and torch.equal(v, c)
