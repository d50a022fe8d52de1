"""Registries are the only lists (issue 25 item 2): a kernel family, a Tokamax family and a
device registered at run time appear in every place that iterates them.

The throwaway registrations are packages written to tmp_path (`toy_family`: one JAX op with
its reference and shapes; `toy_tokamax`: Tokamax's deepseek_rope under the name `toy_rope`,
with its own implementation table, reference, examples and shapes; the device `toy_dev` on
the XPU dispatch key, its kernels tpu_kernels' CPU executor), imported by `toy_registrations`.
Everything runs in fresh processes, so this session's registries are left as they were:

- a script imports them and checks the benchmark suites, the start-up and overhead scripts,
  the generated docs tables, `tpu-kernels bench --device`, `cache_info` and the Tokamax
  implementation choice;
- pytest, with `toy_registrations` as a plugin (imported before any test module), collects
  the cross-cutting tests: each parametrized test that iterates a registry
  (tests/registries.py) must have a case for the throwaway entry, and those cases run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FILES = {
    "toy_family/__init__.py": """
        import jax
        import torch

        from toy_family import reference
        from tpu_kernels import tpu_kernel
        from tpu_kernels.kernels import registry


        @tpu_kernel(
            "toy_ext::toy_triple",
            examples=lambda: [((jax.ShapeDtypeStruct((256, 256), "bfloat16"),), {})],
            sharding="pointwise",
            check_reference=reference.CHECK,
        )
        def toy_triple(x: torch.Tensor, *, scale: float = 3.0) -> torch.Tensor:
            return x * scale


        registry.register(
            __name__,
            op=toy_triple,
            inputs=lambda shape, dtype, device: (registry.randn(shape, dtype, device),),
            kwargs={"scale": 2.5},
        )
    """,
    "toy_family/reference.py": """
        from tpu_kernels.verification.tolerance import Reference


        def toy_triple(x, *, scale=3.0):
            return x * scale


        CHECK = Reference(toy_triple)
    """,
    "toy_family/shapes.py": """
        TEST = {"small": (8, 128)}
        BENCH = {"64x128": (64, 128)}
        QUICK = "64x128"
    """,
    "toy_tokamax/__init__.py": """
        from toy_tokamax.op import toy_rope, toy_rope_op
        from tpu_kernels.tokamax.registry import register

        FAMILY = register(__name__, functions=[toy_rope], ops=[toy_rope_op])
    """,
    "toy_tokamax/op.py": '''
        import torch
        from tokamax import ops

        from toy_tokamax import reference
        from tpu_kernels.tokamax import implementation as impl
        from tpu_kernels.tokamax.placements import rule
        from tpu_kernels.tokamax.wrap import call_op, public_op
        from tpu_kernels.verification.tolerance import Reference

        IMPLEMENTATIONS = (impl.table("toy_rope", {}, api="deepseek_rope"),)


        def toy_rope(
            x: torch.Tensor,
            positions: torch.Tensor,
            cos_sin_cache: torch.Tensor,
            *,
            implementation: str | None = None,
        ) -> torch.Tensor:
            """Tokamax's deepseek_rope under another name."""
            return call_op(toy_rope_op, locals())


        @rule("tokens: x and positions sharded on dim 0")
        def _sharding(a):
            from torch.distributed.tensor import Shard

            return [([Shard(0)], {"x": Shard(0), "positions": Shard(0)})]


        toy_rope_op = public_op(
            toy_rope,
            calls=ops.deepseek_rope,
            symbolic_fake=lambda x, *args, **kwargs: torch.empty_like(x),
            sharding=_sharding,
            check_reference=Reference(reference.toy_rope, scale=4, computes_in=torch.float32),
        )
    ''',
    "toy_tokamax/reference.py": """
        from tpu_kernels.tokamax.rope.reference import deepseek_rope as toy_rope  # noqa: F401
    """,
    "toy_tokamax/examples.py": """
        import torch

        from tpu_kernels.tokamax._examples import BF16, F32, I32, S, on_tpu, randn


        def toy_rope():
            inputs = (S((64, 128), BF16), S((64,), I32), S((128, 64), F32))
            return [(inputs, dict(implementation=on_tpu("toy_rope")))]


        def toy_rope_small():
            gen = torch.Generator().manual_seed(1)
            positions = torch.randint(0, 16, (7,), generator=gen, dtype=torch.int32)
            rn = randn()
            return [((rn(7, 128), positions, rn(16, 64)), {})]
    """,
    "toy_tokamax/shapes.py": """
        TEST = {"flat": (7, 0, 128, 64)}
        BENCH = {"flat": (64, 0, 128, 64)}
    """,
    # registered first, so that every op defined afterwards (the shipped ones too) gets a
    # kernel on it; then the two families
    "toy_registrations.py": """
        import torch

        from tpu_kernels.runtime import devices

        _cpu = devices.get("cpu")
        devices.register(
            devices.DeviceSpec(
                "toy_dev",
                "XPU",
                _cpu.jax_kernel,
                _cpu.available,
                _cpu.synchronize,
                describe=lambda: ("Toy device", torch.device("cpu")),
            )
        )

        import toy_family  # noqa: E402, F401
        import toy_tokamax  # noqa: E402, F401
    """,
}

# What the script finds, place by place: each must name the throwaway entry.
SCRIPT = """
import contextlib, io, json, sys
from pathlib import Path

import toy_registrations  # noqa: F401
import torch

ROOT = Path(sys.argv[1])
sys.path.insert(0, str(ROOT / "bench"))
found = {}

from tests import registries
found["tests/registries kernel_families"] = [f.name for f in registries.kernel_families()]
found["tests/registries tokamax_ops"] = [op.short_name for op in registries.tokamax_ops()]
found["tests/registries device_names"] = registries.device_names()

from tpu_kernels.bench import discover
for suite in ("kernels", "tokamax_ops"):
    benchmarks = discover.load(ROOT / "bench" / f"{suite}.py", quick=True, device_type="cpu")
    found[f"bench/{suite}.py"] = [b.name for b in benchmarks]
toy = [b for b in discover.load(ROOT / "bench" / "kernels.py", quick=True, device_type="cpu")
       if b.name == "toy_triple"]
if toy:  # the suite's candidates run and agree with the reference, the family's kwargs given
    [b] = toy
    p = list(b.sweep(True))[0]  # float32
    xs = b.inputs(p, torch.device("cpu"))
    outs = {c.name: c.fn(*(c.prepare(xs) if c.prepare else xs)) for c in b.candidates(p)}
    want = xs[0] * 2.5  # the family's kwargs (scale=2.5), not the op's default
    from tpu_kernels.bench.correctness import as_tensor
    found["bench/kernels.py toy_triple candidates"] = sorted(
        n for n, o in outs.items() if torch.allclose(as_tensor(o), want)
    )
import startup, overhead
found["bench/startup.py"] = startup.kernel_names()
found["bench/overhead.py"] = list(overhead.op_cases())

from tpu_kernels import docs_tables
for name, generate in docs_tables.GENERATORS.items():
    found[f"docs_tables {name}"] = generate()

from tpu_kernels.cli import main
empty = Path(sys.argv[2]) / "empty.py"
empty.write_text("def benchmarks(quick, device_type):\\n    return []\\n")
err = io.StringIO()
with contextlib.redirect_stderr(err):
    found["tpu-kernels bench --device toy_dev (exit)"] = main(["bench", str(empty), "--device", "toy_dev"])
    main(["bench", str(empty), "--device", "nosuch"])
found["tpu-kernels bench --device: stderr"] = err.getvalue()

from tpu_kernels.kernels import FAMILIES
for name in ("toy_family", "softmax"):
    found[f"cache_info toy_dev: {name}"] = FAMILIES[name].op.cache_info("toy_dev").maxsize > 0

from tpu_kernels import tokamax as tk
from tpu_kernels.tokamax.implementation import platform_of
found["tokamax resolve_implementation toy_rope"] = [
    tk.resolve_implementation("toy_rope", d) for d in ("cpu", "cuda", "tpu")
]
try:
    platform_of("toy_rope", "toy_dev")
except ValueError as e:
    found["tokamax platform_of toy_dev"] = str(e)
print(json.dumps(found))
"""

# parametrized cross-cutting tests -> the throwaway entry each must have a case for
CROSS_CUTTING = {
    "tests/bench/test_suites.py": ("toy_family", "toy_rope"),
    "tests/cache/test_program.py": ("toy_family",),
    "tests/tokamax/test_fakes.py": ("toy_rope",),
    "tests/tokamax/test_tpu_lowering.py": ("toy_rope",),
    "tests/tokamax/test_sharding.py": ("tokamax::toy_rope",),
    "tests/tokamax/test_implementation.py": ("toy_rope",),
    "tests/tokamax/test_compile_dynamic.py": ("toy_rope",),
    "tests/test_registries.py": ("toy_dev",),
    "tests/test_checked.py": ("toy_family",),
    "tests/test_autocast.py": ("toy_family",),
    "tests/test_sharding_sim.py": ("toy_ext::toy_triple",),
}
# collected but not run: its cases are written per op (CASES); a new op must add one, and
# the test says so with a KeyError naming the op
NOT_RUN = ("test_compile_dynamic.py",)


def _write(tmp_path: Path) -> dict[str, str]:
    for rel, text in FILES.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]),
    )


def _run(args: list[str], env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    run = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    return run


@pytest.mark.slow
def test_a_family_a_tokamax_family_and_a_device_registered_at_run_time_appear_everywhere(tmp_path):
    env = _write(tmp_path)
    script = tmp_path / "places.py"
    script.write_text(SCRIPT)
    out = _run([sys.executable, str(script), str(ROOT), str(tmp_path)], env).stdout
    found = json.loads(out.splitlines()[-1])  # the last line: the command prints its suites first

    assert "toy_family" in found["tests/registries kernel_families"]
    assert "toy_rope" in found["tests/registries tokamax_ops"]
    assert "toy_dev" in found["tests/registries device_names"]
    assert "toy_triple" in found["bench/kernels.py"]
    assert found["bench/kernels.py toy_triple candidates"] == ["jax", "torch", "tpu_kernels"]
    assert "tokamax_toy_rope" in found["bench/tokamax_ops.py"]
    assert "toy_triple" in found["bench/startup.py"]
    assert "toy_triple 8x128" in found["bench/overhead.py"]
    tables = {
        name[len("docs_tables ") :]: text for name, text in found.items() if name.startswith("docs_tables ")
    }
    # an outside family's op is named by its own package
    assert "| `toy_family.toy_triple` | `torch.ops.toy_ext.toy_triple(" in tables["shipped-ops"]
    assert "| `toy_family` | `toy_ext::toy_triple` | - |" in tables["kernel-families"]
    assert "`scale=2.5`" in tables["kernel-families"]
    assert "| `toy_dev` | `XPU` |" in tables["devices"]
    assert "| `toy_rope` | `xla` |" in tables["tokamax-implementations"]
    assert "| `toy_rope` | tokens: x and positions sharded on dim 0 |" in tables["tokamax-declarations"]
    assert "| `toy_tokamax` | `toy_rope` | the same |" in tables["tokamax-families"]
    # --device takes it (then the empty suite has nothing to run), and an unknown name lists it
    assert found["tpu-kernels bench --device toy_dev (exit)"] == 2
    stderr = found["tpu-kernels bench --device: stderr"]
    assert "no benchmarks in" in stderr and "unknown device 'nosuch'; use cpu, cuda, tpu, toy_dev." in stderr
    assert found["cache_info toy_dev: toy_family"] and found["cache_info toy_dev: softmax"]
    assert found["tokamax resolve_implementation toy_rope"] == ["xla", "xla", "xla"]
    # Tokamax's platforms are its own (its kernels run on cpu, cuda, tpu): a new device is not
    # one of them until Tokamax says so in tokamax/implementation.py, and the error says that
    assert "tensors on 'toy_dev' are not supported" in found["tokamax platform_of toy_dev"]


@pytest.mark.slow
def test_every_cross_cutting_test_gets_a_case_for_each_throwaway_entry(tmp_path):
    env = _write(tmp_path)
    pytest_args = [sys.executable, "-m", "pytest", "-p", "toy_registrations", "-p", "no:cacheprovider"]
    collected = _run([*pytest_args, "--collect-only", "-q", *CROSS_CUTTING], env).stdout.splitlines()
    toy_ids = []
    for path, names in CROSS_CUTTING.items():
        for name in names:
            ids = [i for i in collected if i.startswith(path + "::") and i.endswith(f"[{name}]")]
            assert ids, f"{path} has no case for the registered {name!r}"
            toy_ids += [i for i in ids if not i.startswith(tuple(f"tests/tokamax/{n}" for n in NOT_RUN))]
    # and those cases pass: the registries' entries are tested, not only listed
    _run([*pytest_args, "-q", *toy_ids], env)
