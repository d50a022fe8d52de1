"""The tiny transformer on Tokamax ops agrees with its plain-PyTorch twin, trains the same,
and compiles to one graph."""

import copy

import pytest
import torch

from tests.helpers import compile_counted
from tpu_kernels.tokamax.models.tiny_transformer import Config, TinyTransformer, synthetic_batch

CONFIG = Config()


def _twins(dtype: torch.dtype = torch.float32) -> tuple[TinyTransformer, TinyTransformer]:
    native = TinyTransformer(CONFIG).to(dtype)
    tokamax = copy.deepcopy(native)
    tokamax.use_tokamax = True
    return native, tokamax


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_outputs_and_gradients_agree_with_the_native_model(dtype):
    native, tokamax = _twins(dtype)
    tokens, targets = synthetic_batch(CONFIG, 4, 16)
    h_native, h_tokamax = native.hidden_states(tokens), tokamax.hidden_states(tokens)
    # float64: the hidden states agree to rounding (measured 1.2e-15). float32: 7e-7, the
    # float32 rounding of different summation orders.
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(h_tokamax, h_native, rtol=tol, atol=tol)
    loss_native, loss_tokamax = native(tokens, targets), tokamax(tokens, targets)
    assert loss_tokamax.dtype == torch.float32  # Tokamax's loss is float32 for every input dtype
    # Its logsumexp is float32 too, so the loss and gradients agree to float32 precision
    # even in float64 (measured: loss 1.4e-7 of 5.0, gradients 4.2e-9; float32: 9.5e-7, 1.9e-8).
    torch.testing.assert_close(loss_tokamax.double(), loss_native.double(), rtol=1e-6, atol=1e-6)
    loss_native.backward()
    loss_tokamax.backward()
    for (name, p), q in zip(native.named_parameters(), tokamax.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def test_twenty_adamw_steps_give_the_same_loss_curve():
    native, tokamax = _twins()
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (native, tokamax)]
    data = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    curves: list[list[float]] = [[], []]
    for _ in range(20):
        tokens, targets = synthetic_batch(CONFIG, 8, 16, generator=data)
        for model, opt, curve in zip((native, tokamax), opts, curves):
            opt.zero_grad()
            loss = model(tokens, targets)
            loss.backward()
            opt.step()
            curve.append(loss.item())
    native_curve, tokamax_curve = torch.tensor(curves[0]), torch.tensor(curves[1])
    assert native_curve[-1] < native_curve[0] - 1.0  # it learns: about 5.1 -> 3.0
    # Tolerance: relative 1e-5 per step. Measured over 6 seeds with AdamW and SGD: at most
    # 1e-6 absolute, 2.4e-7 relative; float32 rounding of two summation orders, not amplified
    # by 20 steps.
    torch.testing.assert_close(tokamax_curve, native_curve, rtol=1e-5, atol=0)


def test_the_tokamax_model_compiles_to_one_graph_and_matches_eager():
    _, tokamax = _twins()
    compiled_model = copy.deepcopy(tokamax)
    tokens, targets = synthetic_batch(CONFIG, 4, 16)
    compiled, counter = compile_counted(compiled_model)
    loss_compiled, loss_eager = compiled(tokens, targets), tokamax(tokens, targets)
    loss_compiled.backward()
    loss_eager.backward()
    assert counter.frame_count == 1, f"graph breaks: {counter.frame_count} graphs"
    torch.testing.assert_close(loss_compiled, loss_eager, rtol=1e-6, atol=1e-6)
    for p, q in zip(tokamax.parameters(), compiled_model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-7)
