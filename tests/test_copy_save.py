"""Ops copy and pickle as references to their registration; modules holding ops deep-copy and
round-trip through torch.save / torch.load (EMA models, checkpoints of whole modules)."""

import copy
import io
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import needs_tokamax, rand
from tpu_kernels import tpu_kernel
from tpu_kernels.kernels import rmsnorm, scale_add, softmax
from tpu_kernels.op import _registered_op

ROOT = Path(__file__).resolve().parents[1]


@tpu_kernel("test_copy_save::double")
def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


class Block(torch.nn.Module):
    """Holds ops as attributes, as model code does."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)
        self.weight = torch.nn.Parameter(torch.ones(16) + 0.1 * torch.randn(16))
        self.norm_op = rmsnorm
        self.act = softmax
        self.extra = double

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.extra(self.act(self.norm_op(self.proj(x), self.weight)))


def _helion_op():
    from tpu_kernels.kernels.helion_ops import softmax_helion

    return softmax_helion


def _tokamax_op():
    from tpu_kernels import tokamax as tk

    return tk.FAMILIES["normalization"].op("layer_norm")


OPS = {
    "pallas": lambda: softmax,
    "jax": lambda: double,
    "derived backward": lambda: scale_add.backward_op,
    "helion": _helion_op,
    "tokamax": _tokamax_op,
    "tokamax backward": lambda: _tokamax_op().backward_op,
}


@pytest.mark.parametrize(
    "which", [pytest.param(w, marks=needs_tokamax) if w.startswith("tokamax") else w for w in OPS]
)
def test_an_op_copies_and_pickles_as_itself(which):
    op = OPS[which]()
    assert copy.copy(op) is op
    assert copy.deepcopy(op) is op
    assert pickle.loads(pickle.dumps(op)) is op
    assert copy.deepcopy({"ops": [op, op]})["ops"][0] is op  # inside containers too


def test_a_module_holding_ops_deep_copies():
    model = Block()
    x = rand(4, 16)
    ema = copy.deepcopy(model)
    assert ema.act is softmax and ema.norm_op is rmsnorm and ema.extra is double
    assert ema.weight is not model.weight  # parameters are copied, ops shared
    with torch.no_grad():
        torch.testing.assert_close(ema(x), model(x), rtol=0, atol=0)
        ema.weight.mul_(2)
        assert not torch.equal(ema(x), model(x))


class Mixed(torch.nn.Module):
    """Holds a Helion op and a Tokamax op."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(1 + 0.1 * torch.randn(128))
        self.act, self.norm = _helion_op(), _tokamax_op()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from tpu_kernels import tokamax as tk

        return tk.rms_norm(self.act(x), self.w)


@needs_tokamax
def test_a_module_holding_helion_and_tokamax_ops_deep_copies_and_round_trips():
    model, x = Mixed(), rand(8, 128)
    ema = copy.deepcopy(model)
    assert ema.act is model.act and ema.norm is model.norm and ema.w is not model.w
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert loaded.act is model.act and loaded.norm is model.norm
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
        torch.testing.assert_close(ema(x), model(x), rtol=0, atol=0)


def test_a_module_holding_ops_round_trips_through_torch_save():
    model = Block()
    x = rand(4, 16)
    buf = io.BytesIO()
    torch.save({"model": model, "op": softmax}, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert loaded["op"] is softmax and loaded["model"].act is softmax
    with torch.no_grad():
        torch.testing.assert_close(loaded["model"](x), model(x), rtol=0, atol=0)


def test_loading_an_op_not_registered_here_names_it():
    with pytest.raises(LookupError, match=r"test_copy_save::never_defined: .*not registered"):
        _registered_op("test_copy_save::never_defined")
    with pytest.raises(LookupError, match=r"test_copy_save::never_defined: .*'no_such_module_xyz'"):
        _registered_op("test_copy_save::never_defined", "no_such_module_xyz")
    with pytest.raises(LookupError, match=r"did not define it"):
        _registered_op("test_copy_save::never_defined", "json")  # imports, but no such op


def test_a_fresh_process_loads_shipped_ops_by_importing_their_module(tmp_path):
    # The loading process imports neither tpu_kernels.kernels nor tpu_kernels itself: the
    # pickle names each op's module, which registers it when imported.
    path = tmp_path / "ops.pt"
    torch.save({"ops": [softmax, scale_add.backward_op]}, path)
    code = (
        "import sys, torch\n"
        f"d = torch.load({str(path)!r}, weights_only=False)\n"
        "sm, bwd = d['ops']\n"
        "assert type(sm).__name__ == 'KernelOp' and sm.name == 'tpu_kernels::softmax'\n"
        "assert bwd.name == 'tpu_kernels::scale_add_backward'\n"
        "assert sm.overload is torch.ops.tpu_kernels.softmax.default\n"
        "print('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), TORCH_DEVICE_BACKEND_AUTOLOAD="0", JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
