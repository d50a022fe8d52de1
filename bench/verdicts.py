"""Does the benchmark's correctness column tell right from wrong? Its verdicts, measured.

1. **Correct results.** Correct implementations of column and row sums, matmuls with long K,
   softmax, rmsnorm and scale_add, in float32 and bfloat16, over many seeds: torch eager (the
   baseline), torch.compile, the shipped kernel through tpu_kernels and as plain JAX, its Helion
   twin, and textbook float32 algorithms (a sequential sum over the reduced axis, a sum of
   256-long blocks, a K-blocked matmul, the eager three-op rmsnorm). For each, how many seeds the
   per-element rule of before (the tolerance table's rtol and atol, atol times the suites' old
   scales) and the normwise rule (tpu_kernels.bench.correctness) call WRONG, and the largest
   error as a multiple of what the normwise rule allows. Every one of them is a false WRONG.
2. **Wrong kernels.** Every bug of the shipped mutation catalogue (tpu_kernels/mutate/
   catalogue/) applied to a copy of its kernel, run on the shipped suites' --quick inputs in
   float32 and bfloat16 and judged as `tpu-kernels bench` judges the op beside torch. A mutant
   whose forward output equals the kernel's on those inputs (a backward, VMEM, semantics or
   input-validation bug, or one the inputs do not reach) cannot be seen by any check of the
   result; it is listed as such.

3. **The shipped suites** (`--suites [NAME ...]`, all when none is named): every candidate
   of their --quick points (`--full`: their sweeps), judged once, without timing.

    python bench/verdicts.py [--seeds 20] [--no-compile] [--no-mutants] [--no-seeds]
                             [--suites [NAME ...]] [--full]

A plain script: figures are printed, never asserted (tests/bench/test_verdicts.py asserts a
representative set). docs/benchmarking.md quotes its figures.
"""

# No `from __future__ import annotations`: tests load this file as a module that is not in
# sys.modules, where dataclasses cannot resolve string annotations.
import argparse
import importlib
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import torch
import torch.nn.functional as F

from tpu_kernels.bench import correctness, discover
from tpu_kernels.bench.suite import to_jax
from tpu_kernels.runtime.devices.jax_exec import pallas_interpret
from tpu_kernels.testing import TOL, dot_scale

ROOT = Path(__file__).resolve().parents[1]
DTYPES = (torch.float32, torch.bfloat16)


def old_rule(actual: Any, expected: torch.Tensor, dtype: torch.dtype, scale: float) -> bool:
    """The rule before the normwise one: every element within rtol * |expected| + atol * scale
    (the tolerance table's float32 2e-5 / 2e-6, bfloat16 1.6e-2 / 8e-3); True when it passes."""
    tol = TOL.get(dtype, TOL[torch.float32])
    a = correctness.as_tensor(actual).to(torch.float64)
    e = expected.to(torch.float64)
    if a.shape != e.shape:
        return False
    diff = torch.where(a == e, 0.0, (a - e).abs())
    return bool((diff <= tol.atol * scale + tol.rtol * e.abs()).all())


# ---- 1. correct results over many seeds ----


@dataclass
class Case:
    name: str
    inputs: Callable[[torch.Generator, torch.dtype], tuple]
    reference: Callable[..., torch.Tensor]  # torch, run on float64 copies for the reference
    candidates: Callable[[], dict[str, Callable[..., Any]]]  # built once: compiled functions
    reduction: int
    old_scale: Callable[[torch.dtype], float] = lambda dt: 1.0  # what the suites passed before


def _randn(g: torch.Generator, *shape: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def _jax(fn: Callable) -> Callable:
    """A JAX function called on torch tensors (converted beforehand, as the benchmark's `jax`
    candidate is), its result back as a tensor."""
    return lambda *xs: correctness.as_tensor(fn(*(to_jax(x) for x in xs)))


def _compiled(fn: Callable, compile_: bool) -> dict[str, Callable]:
    return {"torch.compile": torch.compile(fn, dynamic=False, fullgraph=True)} if compile_ else {}


def _shipped(
    family: str,
    op: str,
    helion: str,
    torch_fn: Callable,
    compile_: bool,
    kwargs: dict | None = None,
    **extra: Callable,
) -> dict[str, Callable]:
    """The candidates of a shipped family's suite (torch, torch.compile, the op through
    tpu_kernels and as plain JAX, its Helion twin), plus `extra` ones; `kwargs` to all but torch."""
    kwargs = kwargs or {}
    kernel = getattr(importlib.import_module(f"tpu_kernels.kernels.{family}"), op)
    twin = getattr(importlib.import_module(f"tpu_kernels.kernels.{family}.helion"), helion)
    return {
        "torch": torch_fn,
        **_compiled(torch_fn, compile_),
        "tpu_kernels": lambda *xs: kernel(*xs, **kwargs),
        "jax": _jax(kernel.jax_function(**kwargs)),
        "helion": lambda *xs: twin(*xs, **kwargs),
        **extra,
    }


def _sequential_sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Recursive summation in float32, one term after another: the least accurate textbook sum
    (what a kernel accumulating one row at a time does)."""
    acc = torch.zeros_like(x.select(dim, 0), dtype=torch.float32)
    for t in x.unbind(dim):
        acc = acc + t.float()
    return acc.to(x.dtype)


def _blocked_sum(x: torch.Tensor, dim: int, block: int = 256) -> torch.Tensor:
    """Blocks of `block` terms summed, their partial sums accumulated in float32 (a Pallas
    kernel with a grid over the reduced axis)."""
    acc = torch.zeros_like(x.select(dim, 0), dtype=torch.float32)
    for part in x.split(block, dim):
        acc = acc + part.float().sum(dim)
    return acc.to(x.dtype)


def _blocked_matmul(a: torch.Tensor, b: torch.Tensor, block: int = 256) -> torch.Tensor:
    acc = torch.zeros(a.shape[0], b.shape[1])
    for k in range(0, a.shape[1], block):
        acc = acc + a[:, k : k + block].float() @ b[k : k + block].float()
    return acc.to(a.dtype)


def _sum_case(shape: tuple[int, int], dim: int, compile_: bool) -> Case:
    def candidates():
        jitted = jax.jit(lambda x: jnp.sum(x.astype(jnp.float32), axis=dim).astype(x.dtype))
        return {
            "torch": lambda x: x.sum(dim),
            **_compiled(lambda x: x.sum(dim), compile_),
            "jax": _jax(jitted),
            "sequential f32": lambda x: _sequential_sum(x, dim),
            "blocked f32": lambda x: _blocked_sum(x, dim),
        }

    return Case(
        f"sum(dim={dim}) {shape[0]}x{shape[1]}",
        lambda g, dt: (_randn(g, *shape, dtype=dt),),
        lambda x: x.sum(dim),
        candidates,
        shape[dim],
    )


@jax.jit
def _xla_dot(a, b):
    """XLA's own matmul (not the Pallas kernel), float32 accumulation."""
    return jnp.matmul(a, b, preferred_element_type=jnp.float32).astype(a.dtype)


def _matmul_case(m: int, k: int, n: int, compile_: bool) -> Case:
    def candidates():
        return _shipped(
            "matmul",
            "matmul",
            "matmul_helion",
            lambda a, b: a @ b,
            compile_,
            **{"K-blocked f32": _blocked_matmul, "XLA dot": _jax(_xla_dot)},
        )

    return Case(
        f"matmul {m}x{k}x{n}",
        lambda g, dt: (_randn(g, m, k, dtype=dt), _randn(g, k, n, dtype=dt)),
        lambda a, b: a @ b,
        candidates,
        k,
        lambda dt: dot_scale(k, dt),
    )


def _softmax_case(shape: tuple[int, int], compile_: bool) -> Case:
    def formula(x):
        e = torch.exp(x.float() - x.float().amax(-1, keepdim=True))
        return (e / e.sum(-1, keepdim=True)).to(x.dtype)

    def candidates():
        return _shipped(
            "softmax",
            "softmax",
            "softmax_helion",
            lambda x: torch.softmax(x, -1),
            compile_,
            **{"formula f32": formula},
        )

    return Case(
        f"softmax {shape[0]}x{shape[1]}",
        lambda g, dt: (_randn(g, *shape, dtype=dt, scale=3.0),),  # as the softmax family registers its inputs
        lambda x: torch.softmax(x, -1),
        candidates,
        shape[-1],
    )


def _rms(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, 1e-6)


def _rmsnorm_case(shape: tuple[int, int], compile_: bool) -> Case:
    def candidates():
        from tpu_kernels.kernels.rmsnorm import reference

        # the eager three-op formula rounds after each op in bfloat16
        return _shipped(
            "rmsnorm", "rmsnorm", "rmsnorm_helion", _rms, compile_, **{"eager three-op": reference.rmsnorm}
        )

    return Case(
        f"rmsnorm {shape[0]}x{shape[1]}",
        lambda g, dt: (_randn(g, *shape, dtype=dt), _randn(g, shape[-1], dtype=dt)),
        _rms,
        candidates,
        shape[-1],
        lambda dt: 3.0,
    )


def _scale_add_case(shape: tuple[int, int], compile_: bool) -> Case:
    def candidates():
        return _shipped(
            "scale_add", "scale_add", "add_helion", lambda x, y: x + 0.5 * y, compile_, {"alpha": 0.5}
        )

    return Case(
        f"scale_add {shape[0]}x{shape[1]}",
        lambda g, dt: (_randn(g, *shape, dtype=dt), _randn(g, *shape, dtype=dt)),
        lambda x, y: x + 0.5 * y,
        candidates,
        1,
        lambda dt: 2.0,
    )


def cases(compile_: bool = True) -> list[Case]:
    return [
        _sum_case((1024, 1024), 0, compile_),
        _sum_case((1024, 1024), 1, compile_),
        _sum_case((8192, 256), 0, compile_),
        _sum_case((256, 8192), 1, compile_),
        _matmul_case(256, 1024, 256, compile_),
        _matmul_case(256, 4096, 256, compile_),
        _matmul_case(128, 16384, 128, compile_),
        _softmax_case((1024, 1024), compile_),
        _softmax_case((256, 4096), compile_),
        _rmsnorm_case((1024, 1024), compile_),
        _rmsnorm_case((256, 4096), compile_),
        _scale_add_case((1024, 1024), compile_),
    ]


@dataclass
class Tally:
    runs: int = 0
    old_wrong: int = 0
    new_wrong: int = 0
    worst: float = 0.0  # the largest error / allowance under the normwise rule
    # the figures behind the rule's constants (bench.correctness), largest over the seeds:
    max_u: float = 0.0  # max-norm error in units of u (the result dtype's unit roundoff)
    max_sqrt_n: float = 0.0  # max-norm error / (u_acc * sqrt(n)): a float32 sum's growth
    vs_torch: float = 0.0  # 2-norm error / torch's
    vs_torch_max: float = 0.0  # max-norm error / torch's

    def add(self, other: "Tally") -> None:
        for f in ("runs", "old_wrong", "new_wrong"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        for f in ("worst", "max_u", "max_sqrt_n", "vs_torch", "vs_torch_max"):
            setattr(self, f, max(getattr(self, f), getattr(other, f)))


def seed_verdicts(case: Case, dtype: torch.dtype, seeds: int) -> dict[str, Tally]:
    """Each candidate's verdicts on `seeds` fresh inputs, old rule and normwise rule."""
    fns = case.candidates()
    tallies = {name: Tally() for name in fns}
    for seed in range(seeds):
        xs = case.inputs(torch.Generator().manual_seed(seed), dtype)
        expected = case.reference(*(x.double() for x in xs))
        outs = {name: fn(*xs) for name, fn in fns.items()}
        measured = {
            n: (correctness.errors(o, expected), correctness.result_dtype(dtype, o)) for n, o in outs.items()
        }
        checks = correctness.verdicts(measured, baseline="torch", reduction=case.reduction)
        base = measured["torch"][0]
        for name, out in outs.items():
            errs, judged_in = measured[name]
            u = correctness.unit_roundoff(judged_in)
            u_acc = correctness.unit_roundoff(correctness.accumulation_dtype(judged_in))
            one = Tally(
                1,
                not old_rule(out, expected, dtype, case.old_scale(dtype)),
                not checks[name].passed,
                checks[name].ratio,
                errs.norm_max / u,
                errs.norm_max / (u_acc * case.reduction**0.5),
                errs.norm2 / base.norm2 if base.norm2 else 0.0,
                errs.norm_max / base.norm_max if base.norm_max else 0.0,
            )
            tallies[name].add(one)
    return tallies


# ---- 2. the mutation catalogue's wrong kernels ----


def _families() -> dict[str, tuple[str, str, dict]]:
    """kernel file -> (the family, the kernel function, its keyword arguments), for every
    registered kernel family of this package with a `pallas.py` (tpu_kernels.kernels.FAMILIES;
    the mutation catalogue mutates this package's files only)."""
    from tpu_kernels.kernels import FAMILIES

    return {
        f"{family.name}/pallas.py": (family.name, family.op.fn.__name__, dict(family.kwargs))
        for family in FAMILIES.values()
        if (KERNELS / family.name / "pallas.py").is_file()
    }


KERNELS = ROOT / "tpu_kernels" / "kernels"
BLOCKS = "tpu_kernels.kernels._blocks"


def _module(path: Path, source: str, name: str, blocks: types.ModuleType | None = None) -> types.ModuleType:
    """`source` run as a fresh module (the shipped package is left alone); `blocks`: a mutated
    _blocks module its `from tpu_kernels.kernels._blocks import ...` gets instead."""
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module  # a dataclass in the source looks its module up while it is built
    saved = sys.modules.get(BLOCKS)
    if blocks is not None:
        sys.modules[BLOCKS] = blocks
    try:
        exec(compile(source, str(path), "exec"), module.__dict__)
    finally:
        if blocks is not None:
            sys.modules[BLOCKS] = saved
    return module


def mutated_kernels(mutation: Any) -> dict[str, Callable]:
    """family name -> the mutated kernel as a jitted JAX function (fast interpreter), for each
    shipped kernel the mutation reaches (a _blocks mutation reaches the kernels that import it)."""
    path = ROOT / mutation.file
    source = path.read_text()
    if source.count(mutation.old) != 1:
        raise ValueError(f"{mutation.id}: its text does not match {mutation.file} exactly once")
    mutated = source.replace(mutation.old, mutation.new)
    rel = path.relative_to(KERNELS).as_posix()
    families = _families()
    if rel == "_blocks.py":
        blocks = _module(path, mutated, "mutant_blocks")
        modules = {
            f: _module(KERNELS / f, (KERNELS / f).read_text(), f"mutant_{f}", blocks)
            for f in families
            if "_blocks import" in (KERNELS / f).read_text()
        }
    elif rel in families:
        modules = {rel: _module(path, mutated, f"mutant_{rel}")}
    else:
        return {}
    return {families[f][0]: _jitted(getattr(m, families[f][1]), families[f][2]) for f, m in modules.items()}


def shipped_kernels() -> dict[str, Callable]:
    """family name -> the shipped kernel, unmutated, as `mutated_kernels` runs the mutants."""
    return {
        suite: _jitted(getattr(_module(KERNELS / f, (KERNELS / f).read_text(), f"shipped_{f}"), fn), kw)
        for f, (suite, fn, kw) in _families().items()
    }


def _jitted(fn: Callable, kwargs: dict) -> Callable:
    def call(*xs):
        with pallas_interpret(True):
            out = fn(*xs, **kwargs)
        return out[0] if isinstance(out, tuple) else out

    return jax.jit(call)


def suite_benchmark(family: str) -> Any:
    """The benchmark of a registered kernel family in bench/kernels.py, as --quick loads it."""
    from tpu_kernels.kernels import FAMILIES

    name = FAMILIES[family].op.short_name
    [b] = [
        b
        for b in discover.load(ROOT / "bench" / "kernels.py", quick=True, device_type="cpu")
        if b.name == name
    ]
    return b


def quick_points() -> Iterator[tuple[str, Any, dict]]:
    """(family, benchmark, point) for every --quick point of every registered kernel family."""
    for family, _, _ in _families().values():
        b = suite_benchmark(family)
        for p in b.sweep(quick=True):
            yield family, b, p


@dataclass
class MutantVerdict:
    mutation: str
    suite: str
    dtype: str
    verdict: str  # "WRONG", "ok", "same output" (as the kernel's) or "error: ..."
    ratio: float | None = None  # error / allowance
    torch_ratio: float | None = None  # its 2-norm error / torch's


def mutant_verdicts(mutations: Any, points: list | None = None) -> list[MutantVerdict]:
    """Each mutation's verdict at each --quick point of the suites it reaches: the mutated
    kernel beside the suite's torch candidate, judged by the benchmark's correctness rule."""
    points = points if points is not None else list(quick_points())
    shipped = shipped_kernels()  # run as the mutants are, to compare bit for bit
    prepared = {}
    for suite, b, p in points:
        inputs = b.inputs(p, torch.device("cpu"))
        judge = correctness.for_point(b, p, inputs)
        # the suite's torch candidate is its reference in the inputs' dtype (bench.kernel_benchmark);
        # called directly, so that building the other candidates (Helion's import) is not paid
        torch_out = b.reference(*inputs, **b.reference_kwargs(p))
        kernel_out = correctness.as_tensor(shipped[suite](*(to_jax(x) for x in inputs)))
        prepared.setdefault(suite, []).append((p, inputs, judge, torch_out, kernel_out))
    rows = []
    for m in mutations:
        for suite, fn in mutated_kernels(m).items():
            for p, inputs, judge, torch_out, kernel_out in prepared.get(suite, []):
                dtype = str(p["dtype"]).removeprefix("torch.")
                try:
                    out = correctness.as_tensor(fn(*(to_jax(x) for x in inputs)))
                except Exception as e:  # a mutant that no longer runs is caught by any test
                    rows.append(MutantVerdict(m.id, suite, dtype, f"error: {type(e).__name__}"))
                    continue
                if out.shape == kernel_out.shape and torch.equal(out, kernel_out):
                    rows.append(MutantVerdict(m.id, suite, dtype, "same output"))
                    continue
                measured = {"torch": judge.measure(torch_out), "mutant": judge.measure(out)}
                check = judge.verdicts(measured)["mutant"]
                rows.append(
                    MutantVerdict(
                        m.id,
                        suite,
                        dtype,
                        "ok" if check.passed else "WRONG",
                        check.ratio,
                        check.error / measured["torch"][0].norm2 if measured["torch"][0].norm2 else None,
                    )
                )
    return rows


# ---- 3. every candidate of the shipped suites ----


def suite_verdicts(suites: list[str], quick: bool) -> list[tuple[str, str, str, Any]]:
    """(benchmark, point, candidate, Check or "error: ...") for every candidate of the shipped
    suites, judged as `tpu-kernels bench` judges it (one call each, no timing)."""
    rows = []
    for suite in suites:
        for b in discover.load(ROOT / "bench" / f"{suite}.py", quick=quick, device_type="cpu"):
            for p in b.sweep(quick):
                inputs = b.inputs(p, torch.device("cpu"))
                judge = correctness.for_point(b, p, inputs)
                if judge is None:
                    continue
                measured, failed = {}, {}
                for c in b.candidates(p):
                    try:
                        args = c.prepare(inputs) if c.prepare else inputs
                        measured[c.name] = judge.measure(c.fn(*args), c.to_torch)
                    except Exception as e:  # reported as the harness reports it
                        failed[c.name] = f"error: {type(e).__name__}"
                checks = judge.verdicts(measured)
                pid = ",".join(f"{k}={v}" for k, v in p.items())
                rows += [(b.name, pid, name, check) for name, check in checks.items()]
                rows += [(b.name, pid, name, err) for name, err in failed.items()]
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--no-compile", action="store_true", help="leave out torch.compile (its compiles)")
    parser.add_argument("--no-seeds", action="store_true", help="only the mutants")
    parser.add_argument("--no-mutants", action="store_true", help="leave out the mutants")
    parser.add_argument(
        "--suites",
        nargs="*",
        metavar="SUITE",
        help="also every candidate of these shipped suites (--quick points)",
    )
    parser.add_argument("--full", action="store_true", help="with --suites: the full sweeps, not --quick's")
    args = parser.parse_args(argv)
    if args.suites is not None:
        names = args.suites or [p.stem for p in discover.suite_files(None, root=ROOT)]
        print(
            f"3. every candidate of the suites {', '.join(names)} ({'full' if args.full else '--quick'} points)"
        )
        wrong = 0
        rows = suite_verdicts(names, quick=not args.full)
        for bench_name, pid, cand, check in rows:
            if isinstance(check, str):
                print(f"{bench_name:28} {pid:44} {cand:16} {check}")
                continue
            wrong += not check.passed
            verdict = "ok" if check.passed else "WRONG"
            print(f"{bench_name:28} {pid:44} {cand:16} {verdict:6} {check.ratio:8.3f} of the allowance")
        print(f"{wrong} WRONG of {len(rows)}\n")
    if not args.no_seeds:
        print(f"1. correct results, {args.seeds} seeds: WRONG before (per element) / after (normwise)")
        print(
            f"{'case':24} {'dtype':9} {'candidate':16} {'before':>7} {'after':>7} {'worst/allowed':>14}"
            f" {'max err/u':>9} {'/(u_acc sqrt n)':>15} {'/torch 2-norm':>13} {'/torch max':>10}"
        )
        total = Tally()
        for case in cases(compile_=not args.no_compile):
            for dtype in DTYPES:
                for name, t in seed_verdicts(case, dtype, args.seeds).items():
                    dt = str(dtype).removeprefix("torch.")
                    print(
                        f"{case.name:24} {dt:9} {name:16} {t.old_wrong:>7} {t.new_wrong:>7} {t.worst:>14.3f}"
                        f" {t.max_u:>9.2f} {t.max_sqrt_n:>15.3f} {t.vs_torch:>13.2f} {t.vs_torch_max:>10.2f}"
                    )
                    total.add(t)
        print(
            f"false WRONG: before {total.old_wrong} of {total.runs} verdicts, after {total.new_wrong} "
            f"(worst error {total.worst:.3f}x the allowance)"
        )
    if not args.no_mutants:
        from tpu_kernels.mutate.catalogue import SHIPPED

        print("\n2. the shipped mutation catalogue, at the suites' --quick points")
        print(f"{'mutant':42} {'suite':12} {'dtype':9} {'verdict':12} {'err/allowed':>11} {'err/torch':>9}")
        for r in mutant_verdicts(SHIPPED):
            ratio = "" if r.ratio is None else f"{r.ratio:.3g}"
            vs_torch = "" if r.torch_ratio is None else f"{r.torch_ratio:.3g}"
            print(f"{r.mutation:42} {r.suite:12} {r.dtype:9} {r.verdict:12} {ratio:>11} {vs_torch:>9}")


if __name__ == "__main__":
    main()
