"""linear_cross_entropy over a space of shapes, blocks and statics (Hypothesis): the loss and
both gradients against torch's float64 unfused loss. tests/kernels/test_linear_cross_entropy.py
has the named cases; the TPU suite imports that file, and the chip has no Hypothesis, so the
property test lives here."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import assert_close, hypothesis_settings
from tpu_kernels.kernels import linear_cross_entropy
from tpu_kernels.kernels.linear_cross_entropy import reference
from tpu_kernels.testing import dot_scale


@given(
    tokens=st.integers(1, 70),
    d=st.sampled_from([8, 24, 128]),
    vocab=st.integers(2, 400),
    blocks=st.sampled_from([(None, None), (16, 128), (32, 256), (8, 128)]),
    statics=st.sampled_from(
        [{}, {"reduction": "sum"}, {"reduction": "none"}, {"softcap": 1.5}, {"label_smoothing": 0.2}]
    ),
    ignored=st.floats(0.0, 0.9),
    seed=st.integers(0, 2**31 - 1),
)
@hypothesis_settings(30, 200)
def test_loss_and_gradients_match_float64_anywhere(tokens, d, vocab, blocks, statics, ignored, seed):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, d, generator=gen)
    weight = torch.randn(vocab, d, generator=gen) * d**-0.5
    labels = torch.randint(0, vocab, (tokens,), generator=gen)
    labels[torch.rand(tokens, generator=gen) < ignored] = -100
    labels[0] = int(torch.randint(0, vocab, (1,), generator=gen))  # at least one token counts
    ours = [t.clone().requires_grad_(True) for t in (hidden, weight)]
    wide = [t.double().requires_grad_(True) for t in (hidden, weight)]
    block_t, block_v = blocks
    loss = linear_cross_entropy(*ours, labels, block_t=block_t, block_v=block_v, **statics)
    want = reference.linear_cross_entropy(*wide, labels, **statics)
    assert_close(loss, want, torch.float32, scale=3, what=f"loss {statics}")
    g = torch.randn(loss.shape, dtype=torch.float64, generator=gen)
    got = torch.autograd.grad((loss * g.float()).sum(), ours)
    ref = torch.autograd.grad((want * g).sum(), wide)
    for name, a, b, k in zip(("hidden", "weight"), got, ref, (max(vocab, d), max(tokens, d))):
        assert_close(
            a, b, torch.float32, scale=3 * dot_scale(k, torch.float32), what=f"grad {name} {statics}"
        )
