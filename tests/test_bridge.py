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
