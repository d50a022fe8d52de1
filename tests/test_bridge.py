"""torch <-> JAX by DLPack: zero copy, and the per-tensor view cache stays correct."""

import jax
import torch

from tests.helpers import rand
from tpu_kernels import bridge


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
