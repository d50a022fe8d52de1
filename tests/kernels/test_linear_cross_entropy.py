"""linear_cross_entropy: the fused LM head and loss against torch's unfused
`F.cross_entropy(hidden @ weight.T, labels)` in float64, in every reduction, with ignored
tokens, soft-capping, label smoothing, ragged vocabularies and the blocks' edges."""

import jax
import pytest
import torch

from tests.helpers import assert_close
from tests.kernels.base import KernelFamilyTests
from tests.kernels.checks import lowers_for_tpu, opcheck
from tpu_kernels.errors import InvalidArgumentError, InvalidArgumentTypeError
from tpu_kernels.kernels import FAMILIES, linear_cross_entropy
from tpu_kernels.kernels.linear_cross_entropy import pallas, reference
from tpu_kernels.testing import dot_scale


class TestLinearCrossEntropy(KernelFamilyTests):
    family = "linear_cross_entropy"
    # "tiled" spans 4 x 4 blocks; "ragged_vocab" ends in a block that reads past the weight
    kernel_kwargs = {"block_t": 16, "block_v": 128}
    small_shape = "odd_tokens"
    gradcheck_shape = (12, 8, 20)
    zero_size_shapes = [(6, 0, 10)]  # d = 0: every logit is 0 (tokens = 0 has its own test: NaN)
    compile_shapes = [(32, 64, 256), (40, 32, 300), (17, 16, 50)]

    def out_scale(self, shape, dtype):
        return 3  # a loss of about log(vocabulary)

    def grad_scales(self, shape, dtype):
        """hidden's gradient sums the vocabulary's weight rows, weight's the tokens' hidden rows
        (reference.CHECK's grad_reduces), each term at most one weight or hidden row."""
        tokens, d, vocab = shape
        return [3 * dot_scale(max(vocab, d), dtype), 3 * dot_scale(max(tokens, d), dtype)]


def _inputs(tokens, d, vocab, dtype=torch.float32, ignored=5):
    hidden, weight, labels = FAMILIES["linear_cross_entropy"].inputs(
        (tokens, d, vocab), dtype, torch.device("cpu")
    )
    labels = torch.randint(0, vocab, (tokens,))
    if ignored:
        labels[::ignored] = -100
    return hidden, weight, labels


def _check_against_float64(tokens, d, vocab, dtype=torch.float32, labels=None, **kw):
    """Loss and both gradients against the float64 reference, with a fresh cotangent."""
    hidden, weight, drawn = _inputs(tokens, d, vocab, dtype)
    labels = drawn if labels is None else labels
    statics = {k: kw.pop(k) for k in ("ignore_index", "reduction", "softcap", "label_smoothing") if k in kw}
    labels = labels.masked_fill(labels == -100, statics.get("ignore_index", -100))
    ours = [t.clone().requires_grad_(True) for t in (hidden, weight)]
    wide = [t.detach().double().requires_grad_(True) for t in (hidden, weight)]
    loss = linear_cross_entropy(*ours, labels, **statics, **kw)
    want = reference.linear_cross_entropy(*wide, labels, **statics)
    assert loss.dtype == dtype and loss.shape == want.shape
    assert_close(loss, want, dtype, scale=3, what=f"loss {statics}")
    g = torch.randn(loss.shape, dtype=torch.float64)
    got = torch.autograd.grad((loss * g.to(dtype)).sum(), ours)
    ref = torch.autograd.grad((want * g.to(dtype).double()).sum(), wide)
    for name, a, b, k in zip(("hidden", "weight"), got, ref, (max(vocab, d), max(tokens, d))):
        assert a.shape == b.shape and a.dtype == dtype
        assert_close(a, b, dtype, scale=3 * dot_scale(k, dtype), what=f"grad {name} {statics}")


@pytest.mark.parametrize(
    "statics",
    [
        {"reduction": "sum"},
        {"reduction": "none"},
        {"softcap": 2.0},
        {"softcap": 0.5, "reduction": "none"},
        {"label_smoothing": 0.1},
        {"label_smoothing": 0.3, "reduction": "sum"},
        {"ignore_index": 7},
    ],
    ids=str,
)
def test_reductions_softcap_and_smoothing_against_float64(statics):
    _check_against_float64(48, 32, 300, **statics, block_t=16, block_v=128)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize(
    "shape", [(64, 128, 512), (40, 64, 300), (37, 32, 100), (5, 16, 129), (200, 64, 1000)], ids=str
)
def test_default_blocks_against_float64(shape, dtype):
    """The default blocks: whole dimensions below a block, a last vocabulary block past the end."""
    _check_against_float64(*shape, dtype=dtype)


def test_leading_dims_are_tokens():
    """hidden [batch, seq, d] with labels [batch, seq]: the flattened call's loss, and
    reduction="none" keeps labels' shape."""
    hidden, weight, labels = _inputs(24, 16, 70)
    flat = linear_cross_entropy(hidden, weight, labels, reduction="none")
    nested = linear_cross_entropy(hidden.reshape(2, 12, 16), weight, labels.reshape(2, 12), reduction="none")
    assert nested.shape == (2, 12)
    torch.testing.assert_close(nested.reshape(-1), flat, rtol=0, atol=0)


def test_labels_outside_the_vocabulary_give_nan_not_a_wrong_loss():
    """torch raises on such a label; a kernel cannot, so the loss is NaN, not a guess."""
    hidden, weight, labels = _inputs(16, 8, 30, ignored=0)
    labels[3] = 30
    assert torch.isnan(linear_cross_entropy(hidden, weight, labels))
    per_token = linear_cross_entropy(hidden, weight, labels, reduction="none")
    assert torch.isnan(per_token[3]) and torch.isfinite(torch.cat([per_token[:3], per_token[4:]])).all()


def test_every_token_ignored_or_none_gives_torchs_nan_and_zero_gradients():
    hidden, weight, labels = _inputs(8, 8, 20)
    labels[:] = -100
    for h in (hidden, hidden[:0]):
        y = labels[: h.shape[0]]
        ours = [t.clone().requires_grad_(True) for t in (h, weight)]
        theirs = [t.clone().double().requires_grad_(True) for t in (h, weight)]
        loss = linear_cross_entropy(*ours, y)
        want = reference.linear_cross_entropy(*theirs, y)
        assert torch.isnan(loss) and torch.isnan(want)
        loss.backward()
        want.backward()
        for a, b in zip(ours, theirs):
            torch.testing.assert_close(a.grad.double(), b.grad, equal_nan=True)


def test_the_residuals_are_log_sum_exp_and_the_token_gradients():
    hidden, weight, labels = _inputs(24, 16, 70, ignored=0)
    loss, lse, dhidden = torch.ops.tpu_kernels.linear_cross_entropy(hidden, weight, labels, reduction="sum")
    logits = hidden.double() @ weight.double().T
    torch.testing.assert_close(lse.double(), torch.logsumexp(logits, -1), rtol=1e-5, atol=1e-5)
    h = hidden.double().requires_grad_(True)
    reference.linear_cross_entropy(h, weight.double(), labels, reduction="sum").backward()
    torch.testing.assert_close(dhidden.double(), h.grad, rtol=1e-4, atol=1e-5)


def test_labels_must_be_integers_and_statics_are_checked():
    hidden, weight, labels = _inputs(8, 8, 20)
    with pytest.raises(
        InvalidArgumentTypeError, match="linear_cross_entropy: argument 'labels' has dtype float32"
    ):
        linear_cross_entropy(hidden, weight, labels.float())
    cases = [
        ((hidden, weight, labels[:4]), {}, "labels must have hidden's leading shape"),
        ((hidden, weight[:, :4], labels), {}, r"expected hidden \[..., d\] and weight \[vocabulary, d\]"),
        ((hidden, weight[:0], labels), {}, "'weight' has no rows"),
        ((hidden, weight.double(), labels), {}, "must have one dtype"),
        ((hidden, weight, labels), {"reduction": "avg"}, "reduction must be one of mean, sum, none"),
        ((hidden, weight, labels), {"softcap": 0.0}, "softcap must be a positive number"),
        ((hidden, weight, labels), {"label_smoothing": 1.5}, r"label_smoothing must lie in \[0, 1\]"),
        ((hidden, weight, labels), {"softcap": 30.0, "label_smoothing": 0.1}, "together are not supported"),
        ((hidden, weight, labels), {"block_v": 100}, "block_v=100 must be a positive multiple of 128"),
    ]
    for args, kwargs, match in cases:
        with pytest.raises(InvalidArgumentError, match=f"linear_cross_entropy: .*{match}"):
            linear_cross_entropy(*args, **kwargs)


def test_the_callers_tensors_are_untouched():
    hidden, weight, labels = _inputs(40, 64, 300)
    copies = [t.clone() for t in (hidden, weight, labels)]
    ours = [t.requires_grad_(True) for t in (hidden, weight)]
    linear_cross_entropy(*ours, labels, block_t=16, block_v=128).backward()
    for a, b in zip((hidden, weight, labels), copies):
        torch.testing.assert_close(a.detach(), b, rtol=0, atol=0)


@pytest.mark.parametrize(
    "statics", [{"softcap": 3.0, "reduction": "none"}, {"label_smoothing": 0.2}], ids=str
)
def test_opcheck_with_softcap_and_smoothing(statics):
    hidden, weight, labels = _inputs(20, 16, 140)
    opcheck(
        linear_cross_entropy,
        (hidden.requires_grad_(True), weight.requires_grad_(True), labels),
        {**statics, "block_t": 16, "block_v": 128},
    )


def test_default_blocks_fit_vmem_and_lead_with_each_kernels_intensity():
    """The forward streams the weight past a token block (a large block_t pays), the backward
    the tokens past a weight block (a large block_v); both fit the VMEM cap at d = 8192."""
    fwd = pallas._plan(
        8192, 128256, 4096, 2, None, None, None, 0.0, pallas.FORWARD_BLOCKS, pallas._forward_need
    )
    bwd = pallas._plan(
        8192, 128256, 4096, 2, None, None, None, 0.0, pallas.BACKWARD_BLOCKS, pallas._backward_need
    )
    assert (fwd.bt, fwd.bv) == (512, 256) and (bwd.bt, bwd.bv) == (256, 512)
    wide = pallas._plan(
        8192, 256000, 8192, 2, None, None, None, 0.0, pallas.FORWARD_BLOCKS, pallas._forward_need
    )
    assert pallas._vmem.fits(pallas._forward_need(wide.bt, wide.bv, 8192, 2))


@pytest.mark.parametrize(
    "tokens, d, vocab, kwargs",
    [
        (8192, 4096, 128256, {}),
        (8192, 3072, 256000, {"softcap": 30.0}),
        (4096, 3584, 152064, {"label_smoothing": 0.1}),
        (1000, 8192, 32000, {}),
    ],
    ids=str,
)
def test_forward_and_backward_lower_for_tpu(tokens, d, vocab, kwargs):
    hidden = jax.ShapeDtypeStruct((tokens, d), "bfloat16")
    weight = jax.ShapeDtypeStruct((vocab, d), "bfloat16")
    labels = jax.ShapeDtypeStruct((tokens,), "int32")
    lowers_for_tpu(linear_cross_entropy, hidden, weight, labels, **kwargs)
    lse = jax.ShapeDtypeStruct((tokens,), "float32")
    dhidden = jax.ShapeDtypeStruct((tokens, d), "float32")
    loss = jax.ShapeDtypeStruct((), "bfloat16")
    lowers_for_tpu(
        linear_cross_entropy.backward_op, hidden, weight, labels, loss, lse, dhidden, loss, **kwargs
    )
