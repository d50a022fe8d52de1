"""The eager shortcut of KernelOp.__call__ gives what the dispatcher gives, and steps aside
whenever the dispatcher might route the call elsewhere."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from tests.helpers import needs_tokamax, rand
from tpu_kernels import tpu_kernel
from tpu_kernels.dispatch.eager import plain_eager
from tpu_kernels.errors import InvalidArgumentTypeError
from tpu_kernels.runtime import bridge


@tpu_kernel("test_eager::axpy")
def axpy(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return x * alpha + y


def test_same_result_as_the_dispatcher_and_shortcut_taken():
    x, y = rand(8, 16), rand(8, 16)
    assert axpy._eager_cpu is not None and axpy._eager_cpu.accepts((x, y, 2.0))
    torch.testing.assert_close(axpy(x, y, 2.0), axpy.overload(x, y, 2.0))
    assert axpy._eager_cpu.accepts((x, y, 2))  # an int where the schema says float, as torch accepts


def test_the_dispatcher_is_used_whenever_it_could_decide_otherwise():
    x, y = rand(8, 16), rand(8, 16)
    check = axpy._eager_cpu.accepts
    assert not check((x.requires_grad_(True), y, 2.0))  # autograd
    with torch.no_grad():
        assert check((x, y, 2.0))  # no gradient needed under no_grad
    x = x.detach()
    assert not check((x, y, "2.0"))  # wrong static type: the dispatcher raises its error
    assert not check((x, torch.empty(8, 16, device="meta"), 2.0))
    assert not check((x, y))  # wrong arity
    with FakeTensorMode():
        assert not plain_eager()
    with TorchDispatchMode():
        assert not plain_eager()

    class Sub(torch.Tensor):
        pass

    assert not check((x.as_subclass(Sub), y, 2.0))


def test_autograd_and_compile_still_work_through_the_dispatcher():
    x = rand(8, 16, requires_grad=True)
    with torch.no_grad():
        out = axpy(x, rand(8, 16), 3.0)
    assert not out.requires_grad
    compiled = torch.compile(lambda a, b: axpy(a, b, 2.0) * 2, backend="aot_eager", fullgraph=True)
    a, b = rand(8, 16), rand(8, 16)
    torch.testing.assert_close(compiled(a, b), (a * 2 + b) * 2)


@tpu_kernel("test_eager::scaled_pair")
def scaled_pair(x: torch.Tensor, scale: int) -> tuple[torch.Tensor, torch.Tensor]:
    return x * scale, x - scale


def test_one_pass_path_agrees_with_the_dispatcher_for_every_case_it_meets():
    base = rand(16, 24)
    x = base.t()  # non-contiguous: the shortcut hands the call to the full executor path
    torch.testing.assert_close(axpy(x, x, 1.5), axpy.overload(x, x, 1.5))
    y = rand(24, 16)
    info = axpy.cache_info()
    first = axpy(y, y, 0.5)  # possibly a new key: compiled by the executor, not the one-pass path
    torch.testing.assert_close(first, y * 0.5 + y)
    again = axpy(y, y, 0.5)  # now the one-pass path: a counted cache hit
    torch.testing.assert_close(again, first)
    assert axpy.cache_info().hits > info.hits
    a, b = scaled_pair(y, 3)  # two outputs: the tuple path
    torch.testing.assert_close(a, y * 3)
    torch.testing.assert_close(b, y - 3)
    a, b = scaled_pair(y, 3)
    torch.testing.assert_close(b, y - 3)


def test_a_failing_kernel_names_the_op_on_the_one_pass_path():
    from tpu_kernels import KernelError

    @tpu_kernel("test_eager::fails_at_run")
    def fails(x: torch.Tensor) -> torch.Tensor:
        import jax

        def boom(a):
            raise RuntimeError("boom at run time")

        return jax.pure_callback(boom, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    x = rand(4, 8)
    for _ in range(2):  # first through the executor, then through the one-pass path
        with pytest.raises(
            KernelError, match="(?s)test_eager::fails_at_run: the kernel failed.*boom at run time"
        ):
            fails(x)


def _raised(call):
    """(exception type, message) of `call()`, or None when it returned."""
    try:
        call()
    except Exception as e:  # noqa: BLE001 - compared below
        return type(e), str(e)
    return None


def test_a_keyword_only_static_passed_positionally_is_refused_on_both_paths():
    """Before: softmax(x, 3) silently ran with block_rows=3 on the shortcut."""
    from tpu_kernels.kernels import softmax

    x = rand(8, 16)
    assert not softmax._eager_cpu.accepts((x, 3))
    shortcut, dispatcher = _raised(lambda: softmax(x, 3)), _raised(lambda: softmax.overload(x, 3))
    assert dispatcher is not None and shortcut == dispatcher
    assert "takes 1 positional argument" in shortcut[1]


def test_keyword_only_defaults_are_filled_so_plain_calls_take_the_shortcut():
    from tpu_kernels.kernels import softmax

    x = rand(8, 16)
    assert softmax._eager_cpu.accepts((x,))
    assert torch.equal(softmax(x), softmax.overload(x))
    assert torch.equal(softmax(x), softmax.overload(x, block_rows=256))


def test_an_int_for_a_float_static_reaches_the_kernel_as_a_float_on_both_paths():
    """x * 2 keeps an int tensor's dtype where x * 2.0 makes it float: the shortcut must
    pass what the dispatcher passes (a float), whichever path compiles first."""

    @tpu_kernel("test_eager::times")
    def times(x: torch.Tensor, alpha: float) -> torch.Tensor:
        return x * alpha

    x = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    first = times(x, 2)  # the shortcut compiles this key
    assert first.dtype == times.overload(x, 2).dtype == torch.float32
    assert torch.equal(first, times.overload(x, 2))


def test_try_all_makes_an_int_for_a_float_static_a_float_as_the_dispatcher_does():
    """KernelOp.try_all (every parameter's value, as tokamax's call_op passes them): an int
    2 for `alpha: float` traced as an int keeps x's int32 where the dispatcher gives float32,
    and 2 == 2.0 share a cache key, so a later alpha=2.0 would get that int32 entry too."""
    from tpu_kernels.dispatch.eager import DECLINED

    @tpu_kernel("test_eager::times_all")
    def times_all(x: torch.Tensor, alpha: float) -> torch.Tensor:
        return x * alpha

    x = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    # the int first, before anything else compiles the key the two share
    got = [times_all.try_all((x, 2)), times_all.try_all((x, 2.0))]
    want = times_all.overload(x, 2.0)
    assert want.dtype == torch.float32
    for out in got:
        assert out is not DECLINED and out.dtype == torch.float32, out
        assert torch.equal(out, want)


def test_an_op_with_optional_tensors_keys_each_dtype_apart_on_the_shortcut():
    """An executor with optional tensors keys each tensor as (shape, dtype): a bfloat16 call
    after a float32 one of the same shape is its own entry, bfloat16 in and out."""

    @tpu_kernel("test_eager::maybe_shift")
    def maybe_shift(x: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        return x * 2 if b is None else x + b

    shortcut = maybe_shift._eager_cpu
    assert not shortcut.simple  # the (shape, dtype) key layout
    x = rand(8, 16)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for b in (None, rand(8, 16).to(dtype)):
            args = (x.to(dtype), b)
            # the executor's own key: a call the shortcut keys otherwise never finds its entry
            assert shortcut.key(args) == shortcut.executor._arrays_and_key(list(args))[1]
            for _ in range(2):  # the second call: the one-pass path, from the entry
                out = maybe_shift(*args)
                assert out.dtype == dtype
                want = args[0] * 2 if b is None else args[0] + b
                torch.testing.assert_close(out, want, rtol=0, atol=0)


def test_a_non_contiguous_input_is_right_when_its_key_is_compiled():
    """The one-pass path hands contiguous tensors to the compiled entry; a transposed one of
    the same shape and dtype goes to the executor, which makes it contiguous."""
    x = rand(16, 24).t()  # (24, 16), non-contiguous
    y = rand(24, 16)
    torch.testing.assert_close(axpy(y, y, 1.5), y * 1.5 + y)  # compiles the key
    for _ in range(2):
        torch.testing.assert_close(axpy(x, y, 1.5), x * 1.5 + y, rtol=0, atol=0)
        torch.testing.assert_close(axpy(y, x, 1.5), y * 1.5 + x, rtol=0, atol=0)


def test_a_missing_tensor_names_the_argument_on_both_paths():
    from tpu_kernels.kernels import rmsnorm, softmax

    x = rand(8, 16)
    cases = [
        (lambda: softmax(None), lambda: softmax.overload(None), "argument 'x' must be a Tensor"),
        (lambda: axpy(None, x, 2.0), lambda: axpy.overload(None, x, 2.0), "argument 'x' must be a Tensor"),
        (lambda: axpy(x, None, 2.0), lambda: axpy.overload(x, None, 2.0), "argument 'y' must be a Tensor"),
        (lambda: rmsnorm(x, None), lambda: rmsnorm.overload(x, None), "argument 'weight' must be a Tensor"),
    ]
    for shortcut, dispatcher, message in cases:
        got, expected = _raised(shortcut), _raised(dispatcher)
        assert got == expected, (got, expected)
        assert got[0] is InvalidArgumentTypeError and message in got[1], got
    # with autograd on, the same error
    assert _raised(lambda: axpy(None, rand(8, 16, requires_grad=True), 2.0))[0] is InvalidArgumentTypeError


@pytest.mark.filterwarnings("ignore:.*quantized tensor creation functions")
def test_sparse_and_quantized_tensors_go_to_the_dispatcher():
    x = rand(8, 16)
    assert not axpy._eager_cpu.accepts((x.to_sparse(), x, 2.0))
    q = torch.quantize_per_tensor(x, 0.1, 0, torch.qint8)
    assert not axpy._eager_cpu.accepts((q, x, 2.0))


def test_only_optional_tensors_all_none_and_unsupported_layouts_are_clear_errors():
    from tpu_kernels import KernelError

    @tpu_kernel("test_eager::maybe")
    def maybe(x: torch.Tensor | None = None) -> torch.Tensor:
        return x * 2

    for call in (lambda: maybe(None), lambda: maybe.overload(None)):
        with pytest.raises(KernelError, match="test_eager::maybe: called without any tensor argument"):
            call()
    x = rand(8, 16)
    for call in (lambda: axpy(x.to_sparse(), x, 2.0), lambda: axpy.overload(x.to_sparse(), x, 2.0)):
        with pytest.raises(
            NotImplementedError,
            match=r"test_eager::axpy: no kernel for tensors on cpu, cpu \(torch.sparse_coo\)",
        ):
            call()


def test_an_int_default_of_a_float_static_reaches_the_kernel_as_the_dispatcher_passes_it(monkeypatch):
    # what the kernel sees is recorded while it is traced: no kernel from the on-disk cache
    monkeypatch.setenv("TPU_KERNELS_CACHE_DIR", "off")
    seen = []

    @tpu_kernel("test_eager::int_default")
    def scaled(x: torch.Tensor, alpha: float = 2) -> torch.Tensor:
        seen.append(type(alpha))
        return x * alpha

    x = torch.arange(4, dtype=torch.int32)
    assert torch.equal(scaled(x), scaled.overload(x))
    assert scaled(x).dtype == scaled.overload(x).dtype
    scaled.cache_clear()
    seen.clear()
    scaled(x)
    scaled.cache_clear()
    scaled.overload(x)
    assert seen[0] is seen[-1]  # the same static type on both paths


def test_keyword_arguments_take_the_shortcut_and_agree_with_the_dispatcher():
    """Before: any keyword (a keyword-only static such as scale_add's alpha, every Tokamax
    call) sent the call through the dispatcher's two Python kernels."""
    from tpu_kernels.kernels import scale_add

    x, y = rand(8, 128), rand(8, 128)
    assert scale_add._eager_cpu.accepts((x, y), {"alpha": 0.5})
    assert scale_add._eager_cpu.accepts((x,), {"y": y, "alpha": 2})  # a positional one by name; an int
    torch.testing.assert_close(scale_add(x, y, alpha=0.5), scale_add.overload(x, y, alpha=0.5))
    torch.testing.assert_close(scale_add(x, y=y, alpha=2), scale_add.overload(x, y, alpha=2.0))
    for bad in ({"alpha": 0.5, "nope": 1}, {"x": x}):  # unknown, given twice: the dispatcher's error
        assert not scale_add._eager_cpu.accepts((x, y), bad)
        assert (
            _raised(lambda b=bad: scale_add(x, y, **b))[0]
            is _raised(lambda b=bad: scale_add.overload(x, y, **b))[0]
        )


@needs_tokamax
def test_optional_tensors_and_optional_statics_take_the_shortcut():
    import tpu_kernels.tokamax as tk
    from tpu_kernels.tokamax.normalization.op import layer_norm_op

    x, w = rand(8, 64), rand(64)
    call = {"dim": -1, "eps": 1e-6, "scale_offset": 0.0, "subtract_mean": False, "implementation": "xla"}
    assert layer_norm_op._eager_cpu.accepts((x, w, None), call)  # bias None, implementation str?
    assert layer_norm_op._eager_cpu.accepts((x, w, None), {**call, "implementation": None})
    torch.testing.assert_close(tk.rms_norm(x, w), layer_norm_op.overload(x, w, None, **call))


def test_a_bucketed_call_at_a_bucket_builds_its_key_once(monkeypatch):
    """Before: the shortcut built a key it threw away, then the executor built it again."""
    from tpu_kernels.kernels import softmax

    x = rand(128, 64)  # 128 rows: a bucket, not padded
    softmax(x)
    executor = softmax._eager_cpu.executor
    calls = []
    real = type(executor)._arrays_and_key
    monkeypatch.setattr(type(executor), "_arrays_and_key", lambda self, v: calls.append(1) or real(self, v))
    torch.testing.assert_close(softmax(x), torch.softmax(x, -1))
    assert calls == []  # the shortcut's key found the entry
    y = rand(100, 64)  # padded to its bucket: the full path, still right
    torch.testing.assert_close(softmax(y), torch.softmax(y, -1))
    assert calls


def test_a_bucketed_op_checks_its_buckets_once_per_key_and_still_pads_other_shapes(monkeypatch):
    """The shortcut remembers the keys whose calls run unpadded (whether a call pads depends
    only on its key's shapes, dtypes and statics); every other shape still pads."""
    from tpu_kernels.kernels import softmax

    padded = softmax._eager_cpu.padded
    checks = []
    real = type(padded).needs_padding
    monkeypatch.setattr(type(padded), "needs_padding", lambda self, v: checks.append(1) or real(self, v))
    at_bucket, off_bucket = rand(64, 40), rand(5, 40)  # 64 rows: a bucket; 5 rows pad to 8
    for _ in range(3):
        for x in (at_bucket, off_bucket, at_bucket.double(), off_bucket.double()):
            torch.testing.assert_close(softmax(x), torch.softmax(x, -1))
    # once per unpadded key (float32 and float64 at 64 rows); every call of a padded shape
    assert len(checks) == 2 + 3 * 2


# ---- a tensor passed again (its JAX view cached) is checked again on every call ----------


def _cached(*ts: torch.Tensor) -> None:
    for _ in range(3):  # seen, then cached (bridge.ViewCache), then served from the cache
        axpy(*ts, 2.0)
    assert all(id(t) in bridge.VIEWS.views for t in ts)


def _agree(x: torch.Tensor, y: torch.Tensor) -> None:
    out, want = axpy(x, y, 2.0), axpy.overload(x, y, 2.0)
    assert (out.dtype, out.shape, out.requires_grad) == (want.dtype, want.shape, want.requires_grad)
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    torch.testing.assert_close(out.double(), x.detach().double() * 2 + y.double(), rtol=1e-6, atol=1e-6)


CHANGES = {
    # what can change on the same tensor object between two calls
    "new memory": lambda x: setattr(x, "data", rand(16, 16)),
    "dtype": lambda x: setattr(x, "data", x.data.view(torch.int32) % 7),
    "dtype over the same memory": lambda x: setattr(x, "data", x.data.view(torch.int32)),
    "strides (transposed in place)": lambda x: x.t_(),
    "requires grad": lambda x: x.requires_grad_(True),
    "in-place write": lambda x: x.mul_(3),
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_cached_tensor_changed_between_calls_gives_the_dispatchers_result(change):
    x, y = rand(16, 16), rand(16, 16)
    _cached(x, y)
    CHANGES[change](x)
    _agree(x, y)
    _agree(x, y)  # and again, once the changed tensor may be cached anew


def test_grad_and_inference_modes_are_read_on_every_call_for_cached_tensors():
    x, y = rand(16, 16, requires_grad=True), rand(16, 16)
    with torch.no_grad():
        _cached(x, y)
    assert axpy(x, y, 2.0).requires_grad  # grad mode on again: the autograd kernel's path
    with torch.inference_mode():
        out = axpy(x, y, 2.0)
    assert out.is_inference() and not out.requires_grad
    torch.testing.assert_close(out, x.detach() * 2 + y)


def test_threads_calling_one_op_with_different_tensors_each_get_their_own_result():
    """Two threads, each with its own cached tensors of another shape and dtype, call one op
    at once: neither is ever served the other's key, views or compiled entry."""
    import threading

    pairs = [(rand(8, 16), rand(8, 16)), (rand(16, 8).double(), rand(16, 8).double())]
    for x, y in pairs:
        _cached(x, y)
    failures = []

    def work(x: torch.Tensor, y: torch.Tensor) -> None:
        want = x * 2.0 + y
        for _ in range(300):
            out = axpy(x, y, 2.0)
            if out.dtype != x.dtype or out.shape != x.shape or not torch.equal(out, want):
                failures.append((x.dtype, out.dtype, out.shape))
                return

    threads = [threading.Thread(target=work, args=pair) for pair in pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


# ---- the memo of an op's last call (EagerCpuCall._recall) -------------------------------
# A call whose tensors all come from the view cache is remembered (records, statics, interpret
# mode, precision, entry); the same call again runs without building the key. Each test
# changes one thing the key holds, or the entry's life, after the memo is set.


def _memoized(*ts: torch.Tensor, alpha: float = 2.0) -> None:
    _cached(*ts)
    axpy(*ts, alpha)
    assert axpy._eager_cpu._memo is not None


def test_the_memo_serves_only_the_same_call_again():
    x, y = rand(16, 16), rand(16, 16)
    _memoized(x, y)
    for alpha in (3.0, 2, 2.0, 0.5):  # another static, an int for the float (made 2.0)
        torch.testing.assert_close(axpy(x, y, alpha), x * float(alpha) + y, rtol=0, atol=0)
    z = rand(16, 16)  # another tensor of the same shape: its own values
    torch.testing.assert_close(axpy(z, y, 2.0), z * 2.0 + y, rtol=0, atol=0)
    torch.testing.assert_close(axpy(y, x, 2.0), y * 2.0 + x, rtol=0, atol=0)  # swapped


def test_the_memo_runs_no_entry_the_cache_has_dropped():
    x, y = rand(16, 16), rand(16, 16)
    _memoized(x, y)
    axpy.cache_clear()  # e.g. the tuner's: entries traced before a new config are dropped
    torch.testing.assert_close(axpy(x, y, 2.0), x * 2.0 + y, rtol=0, atol=0)
    assert axpy.cache_info().misses == 1  # compiled again, not served by the memo


@tpu_kernel("test_eager::scaled_matmul")
def scaled_matmul(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    return (x @ y) * scale


def test_the_memo_follows_the_matmul_precision_and_the_interpret_mode():
    import tpu_kernels

    x, y = rand(16, 16), rand(16, 16)
    scaled_matmul.cache_clear()  # run with each twin of the checks: each starts cold
    for _ in range(4):
        scaled_matmul(x, y, 2.0)
    assert scaled_matmul._eager_cpu._memo is not None
    misses = scaled_matmul.cache_info().misses
    before = torch.get_float32_matmul_precision()
    other = "medium" if before != "medium" else "highest"
    try:
        torch.set_float32_matmul_precision(other)
        scaled_matmul(x, y, 2.0)
    finally:
        torch.set_float32_matmul_precision(before)
    assert scaled_matmul.cache_info().misses == misses + 1  # a new precision: a new key
    with tpu_kernels.interpret_mode("tpu"):
        torch.testing.assert_close(scaled_matmul(x, y, 2.0), (x @ y) * 2.0)
    assert scaled_matmul.cache_info().misses == misses + 2  # a new interpret mode: a new key


def test_the_memo_reads_grad_mode_again():
    x, y = rand(16, 16, requires_grad=True), rand(16, 16)
    with torch.no_grad():
        _memoized(x, y)
    out = axpy(x, y, 2.0)  # grad mode on: the autograd kernel's path, not the memo
    assert out.requires_grad and out.grad_fn is not None


def test_the_memo_keeps_no_dropped_tensors_view_alive():
    """The memo holds the records weakly: a tensor the program drops frees its view (and the
    alias of its storage the view holds) as if the memo were not there."""
    import gc
    import weakref

    x, y = rand(16, 16), rand(16, 16)
    _memoized(x, y)
    record = weakref.ref(bridge.VIEWS.views[id(x)])
    del x
    gc.collect()
    assert record() is None


def test_the_shortcut_runs_under_inference_mode_and_declines_other_dispatch_states():
    x, y = rand(16, 16), rand(16, 16)
    with torch.inference_mode():
        assert plain_eager() and axpy._eager_cpu.accepts((x, y, 2.0))
        _memoized(x, y)
        out, want = axpy(x, y, 2.0), axpy.overload(x, y, 2.0)
    assert out.is_inference() and want.is_inference()
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    assert not out.requires_grad
    with torch._C._AutoDispatchBelowAutograd():  # a guard the shortcut does not know
        assert not plain_eager()


# ---- a float static's sign of zero is part of the cache key ----------------------------


@tpu_kernel("test_eager::divide")
def divide(x: torch.Tensor, alpha: float, alphas: list[float]) -> torch.Tensor:
    return x / alpha + x / alphas[0]


@tpu_kernel("test_eager::over")
def over(x: torch.Tensor, alpha: float) -> torch.Tensor:
    return x / alpha  # scalar statics only: the memo of the last call takes it


@pytest.mark.parametrize("first", [0.0, -0.0])
def test_zero_and_negative_zero_statics_never_share_an_executable(first):
    """0.0 == -0.0 (and they hash alike), but each traces its own constant: x / -0.0 is -inf.
    On every path (the shortcut, its memo of the last call, the dispatcher), in either order."""
    x = torch.ones(4)
    for _ in range(3):  # cached views: the third call sets the memo
        divide(x, first, [first])
    for alpha in (-first, first, -first):
        want = x / alpha + x / alpha
        torch.testing.assert_close(divide(x, alpha, [alpha]), want, rtol=0, atol=0)
        torch.testing.assert_close(divide.overload(x, alpha, [alpha]), want, rtol=0, atol=0)
    mixed = x / first + x / -first  # inf + -inf: nan where each sign is kept
    torch.testing.assert_close(divide(x, first, [-first]), mixed, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(divide(x, 1.0, [first]), x + x / first, rtol=0, atol=0)
    for _ in range(3):
        over(x, first)
    assert over._eager_cpu._memo is not None
    torch.testing.assert_close(over(x, -first), x / -first, rtol=0, atol=0)
