"""The tables in README.md and docs/ that restate the code, generated from it.

Each table sits in a marked region of a page:

    <!-- generated: NAME -->
    ...
    <!-- end generated -->

`python -m tpu_kernels.docs_tables` rewrites every region from the code;
`python -m tpu_kernels.docs_tables --check` only says which are stale (exit 1).
`tests/test_docs_tables.py` regenerates them in memory and compares, so a code
change that makes a page wrong fails CI with the command to run. The measured
figures' regions render the records in bench/reports/ (`docs_perf.py`), so they
change only when `python bench/record.py` measures them again.

Not imported by `tpu_kernels` itself: rendering imports every shipped op, Tokamax
and Helion, which an ordinary `import tpu_kernels` must not pay for.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from tpu_kernels import _compat, docs_perf
from tpu_kernels.commands._args import summary

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "python -m tpu_kernels.docs_tables"
REGION = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _number(v: float) -> str:
    """1e-10, 2e-5, 1.6e-2: as the tolerance table has always been written."""
    mantissa, exponent = f"{v:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def _codes(names: list[str] | tuple[str, ...]) -> str:
    return ", ".join(f"`{n}`" for n in names) or "-"


# ---- Tokamax: implementations per op and device -------------------------------------------


def tokamax_implementations() -> str:
    """Per op: the implementations that run on each device, and the default
    `resolve_implementation(op, device)` gives on this install."""
    import tpu_kernels.tokamax  # noqa: F401  (registers every family's table)
    from tpu_kernels.tokamax.implementation import (
        CPU,
        CUDA,
        OPS,
        REGISTERED,
        TPU,
        implementations,
        resolve_implementation,
    )

    platforms = (CPU, CUDA, TPU)
    lines = [
        "| op | runs on cpu | runs on cuda | runs on tpu | default cpu | default cuda | default tpu |",
        "|---|---|---|---|---|---|---|",
    ]
    dropped = []
    for op, spec in OPS.items():
        runs = [_codes(implementations(op, p)) for p in platforms]
        defaults = [f"`{resolve_implementation(op, p)}`" for p in platforms]
        lines.append(f"| `{op}` | " + " | ".join(runs + defaults) + " |")
        for p in platforms:
            missing = [n for n in spec.defaults[p].split(",") if n not in REGISTERED[op]]
            if missing:
                dropped.append(
                    f"- `{op}` on {p}: Tokamax's order is `{spec.defaults[p]}`; "
                    f"{_codes(missing)} not importable here, so the default is "
                    f"`{resolve_implementation(op, p)}`."
                )
    if dropped:
        lines += ["", "Dropped from a default on this install (Tokamax could not import them):", "", *dropped]
    return "\n".join(lines) + "\n"


def tokamax_declarations() -> str:
    """Per Tokamax op (tokamax.FAMILIES): its sharding rule, in words, and its autocast policy."""
    from tpu_kernels.tokamax import FAMILIES
    from tpu_kernels.tokamax.placements import describe

    lines = ["| op | sharding (DTensor) | autocast |", "|---|---|---|"]
    lines += [
        f"| `{op.short_name}` | {describe(op.sharding)} | `{op.autocast}` |"
        for family in FAMILIES.values()
        for op in family.ops
    ]
    return "\n".join(lines) + "\n"


def tokamax_families() -> str:
    """`tokamax.FAMILIES`: each family's ops and public functions."""
    from tpu_kernels.tokamax import FAMILIES

    lines = ["| family | ops (`torch.ops.tokamax.*`) | public functions |", "|---|---|---|"]
    for f in FAMILIES.values():
        ops = [op.short_name for op in f.ops]
        functions = [fn.__name__ for fn in f.functions]
        lines.append(
            f"| `{f.name}` | {_codes(ops)} | {'the same' if functions == ops else _codes(functions)} |"
        )
    return "\n".join(lines) + "\n"


# ---- the command line -----------------------------------------------------------------------

# What each exit status of each subcommand means. Keys are 0 or the name of an EXIT_*
# constant of the command's module (`tpu_kernels/commands/<module>.py`); the values are
# read from the module, and every EXIT_* constant must be described for one of its
# subcommands (`cli_reference` raises otherwise), so a new exit code cannot go unlisted.
EXIT_MEANINGS: dict[str, dict[int | str, str]] = {
    "bench": {
        0: "every benchmark ran and every candidate's result was correct",
        "EXIT_WRONG": "the op under test gave a wrong result or failed at some point",
        "EXIT_USAGE": "nothing to run, a bad option, or a `--compare` file that is not a report",
        "EXIT_REGRESSION": "`--compare`: regressions against the baseline",
        "EXIT_INCONCLUSIVE": "`--compare`: no regression, but the op slower beside a baseline that moved far more (a busy machine): no verdict",
    },
    "compare": {
        0: "no regressions",
        "EXIT_USAGE": "a file that is missing or is not a report",
        "EXIT_REGRESSION": "regressions (a median slower by more than `--threshold`)",
        "EXIT_INCONCLUSIVE": "no regression, but the op under test slower beside a baseline that slowed by more than `--threshold` beyond it (a busy machine): no verdict; run again quieter",
    },
    "check": {
        0: "every op lowered and passed the checks (warnings allowed)",
        "EXIT_FAILED": "some op failed (the op's line says what failed)",
        "EXIT_NOTHING": "no ops found, a module that does not import, or a bad option",
    },
    "new": {
        0: "the kernel package was written (or `--list` printed the templates)",
        "EXIT_USAGE": "a missing NAME or `--template`, an unknown template or backend, or a folder that cannot be written",
    },
    "tune": {
        0: "every call was tuned (its table entries written unless `--no-save`)",
        "EXIT_NONE_SURVIVED": "at some call no candidate both ran and was right: a measured call is recorded as a failed entry, "
        "which calls there refuse to run (NoRightConfigError); a predicted one keeps its defaults",
        "EXIT_USAGE": "a target that does not import or calls no tunable op, a bad option, or a chip that can be neither measured nor predicted here",
    },
    "cache": {
        0: "done (`info` also when the cache is off)",
        "EXIT_USAGE": "`clear` while the on-disk cache is off, or a `--dir` that is not a readable directory",
    },
}


def _parsers() -> tuple[dict[str, argparse.ArgumentParser], dict[str, object], dict[str, str]]:
    """Each subcommand's parser, built as `tpu-kernels` builds it, its module and its one-line help."""
    from tpu_kernels import commands

    parser = argparse.ArgumentParser(prog="tpu-kernels")
    sub = parser.add_subparsers(dest="command")
    modules: dict[str, object] = {}
    for module in commands.ALL:
        before = set(sub.choices)
        module.add_parser(sub)
        modules.update({name: module for name in set(sub.choices) - before})
    helps = {name: summary(name, module.__doc__ or "") for name, module in modules.items()}
    return dict(sub.choices), modules, helps


def _argument(action: argparse.Action) -> str:
    if action.option_strings:
        text = ", ".join(action.option_strings)
        if action.nargs != 0:
            text += " " + (action.metavar or action.dest.upper())
    else:
        text = action.metavar or action.dest
        if action.nargs in ("?", "*"):
            text = f"[{text}{' ...' if action.nargs == '*' else ''}]"
    return f"`{text}`"


def _default(action: argparse.Action) -> str:
    if action.choices:
        choices = "one of " + ", ".join(f"`{c}`" for c in action.choices)
    else:
        choices = ""
    default = action.default
    shown = "" if default in (None, False, [], argparse.SUPPRESS) else f"default `{default}`"
    return "; ".join(t for t in (choices, shown) if t) or "-"


def cli_reference() -> str:
    """Every subcommand: its arguments (from its argparse parser) and exit statuses."""
    parsers, modules, helps = _parsers()
    out: list[str] = []
    for name, p in parsers.items():
        module = modules[name]
        meanings = EXIT_MEANINGS.get(name)
        if meanings is None:
            raise KeyError(
                f"docs_tables: describe the exit statuses of `tpu-kernels {name}` in EXIT_MEANINGS"
            )
        summary = helps[name] or (p.description or "").split("\n")[0]
        out += [f"### `tpu-kernels {name}`", "", _cell(summary[0].upper() + summary[1:]) + ".", ""]
        out += ["| argument | values | what |", "|---|---|---|"]
        for action in _compat.parser_actions(p):
            out.append(f"| {_argument(action)} | {_default(action)} | {_cell(action.help or '-')} |")
        out += ["", "| exit status | meaning |", "|---|---|"]
        codes = []
        for key, meaning in meanings.items():
            value = key if isinstance(key, int) else getattr(module, key)
            codes.append((value, meaning))
        out += [f"| {value} | {meaning} |" for value, meaning in sorted(codes)]
        out.append("")
    for module in set(modules.values()):
        names = {n for n in vars(module) if n.startswith("EXIT_")}
        described = {k for c, m in modules.items() if m is module for k in EXIT_MEANINGS.get(c, {})}
        if names - described:
            raise KeyError(
                f"docs_tables: {module.__name__} defines {sorted(names - described)}, which EXIT_MEANINGS "
                "does not describe for any of its subcommands"
            )
    return "\n".join(out).rstrip("\n") + "\n"


# ---- shipped ops ------------------------------------------------------------------------------


def _backward_kind(op) -> str:
    from tpu_kernels.dispatch import autograd

    b = op.backward_impl
    if b is None:
        return "none"
    if isinstance(b, autograd.ExplicitBackward):
        if isinstance(b.bwd, autograd.Composite):  # not an op of its own
            return f"composite (a torch function calling kernel ops), wrt {_codes(b.wrt)}"
        return f"kernel, `{b.bwd.name}`, wrt {_codes(b.wrt)}"
    source = "the reference" if op.reference is not None else "the body"
    return f"`jax.vjp` of {source}, `{op.backward_op.name}`"


def _returns(op) -> str:
    visible, saved = op.output_names[: op.n_visible], op.output_names[op.n_visible :]
    text = _codes(visible)
    return text + (f" (the op also returns {_codes(saved)}, saved for the backward)" if saved else "")


def shipped_ops() -> str:
    """The ops of every registered kernel family (tpu_kernels.kernels.FAMILIES): each Pallas
    op, then the ops each family's helion.py exports (importing Helion), by name."""
    from tpu_kernels.kernels import FAMILIES

    def where(package: str) -> str:
        return "tpu_kernels.kernels" if package.startswith("tpu_kernels.kernels.") else package

    pallas = sorted((f.op.short_name, where(f.package), f.op) for f in FAMILIES.values())
    helion = sorted(
        (
            name,
            where(f.package) + ".helion_ops"
            if where(f.package) == "tpu_kernels.kernels"
            else module.__name__,
            getattr(module, name),
        )
        for f in FAMILIES.values()
        if (module := f.helion_module()) is not None
        for name in module.__all__
    )
    lines = [
        "| function | op and schema | the function returns | backward | autocast |",
        "|---|---|---|---|---|",
    ]
    for name, module, op in pallas + helion:
        lines.append(
            f"| `{module}.{name}` | `torch.ops.{op.ns}.{op.short_name}{_cell(op.schema)}` | "
            f"{_returns(op)} | {_backward_kind(op)} | `{op.autocast}` |"
        )
    return "\n".join(lines) + "\n"


def tunables() -> str:
    """The shipped ops' tunables (`tune=`): each tunable, its declared default, its candidates."""
    from tpu_kernels.kernels import FAMILIES

    lines = ["| op | tunable | default | candidates `tpu_kernels.autotune` tries |", "|---|---|---|---|"]
    for f in FAMILIES.values():
        t = f.op.tunables
        if t is None:
            continue
        space = t.space()
        for i, name in enumerate(t.names):
            values = ", ".join(repr(v) for v in space[name])
            lines.append(f"| `{f.op.name}` | `{name}` | `{t.default[i]!r}` | {values} |")
    return "\n".join(lines) + "\n"


def _shapes(table: dict, bold: str | None = None) -> str:
    return ", ".join(f"**{n}**" if n == bold else n for n in table) or "-"


def _callable_name(fn) -> str:
    return f"`{fn.__module__.removeprefix('tpu_kernels.kernels.')}.{fn.__qualname__}`"


def kernel_families() -> str:
    """`tpu_kernels.kernels.FAMILIES`: each family's op, Helion twin, baseline and shapes (REDUCED:
    the BENCH sizes a CPU times by default, all of them when the family names none)."""
    from tpu_kernels.kernels import FAMILIES

    lines = [
        "| family (folder) | op | Helion twin | benchmark baseline | call kwargs | TEST shapes | BENCH shapes (**QUICK**) | REDUCED (a CPU's default) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in FAMILIES.values():
        baseline = _callable_name(f.baseline or f.torch_reference)
        kwargs = ", ".join(f"`{k}={v!r}`" for k, v in f.kwargs.items()) or "-"
        lines.append(
            f"| `{f.name}` | `{f.op.name}` | {f'`{f.helion}`' if f.helion else '-'} | {baseline} | {kwargs} | "
            f"{_shapes(f.shapes.TEST)} | {_shapes(f.shapes.BENCH, f.shapes.QUICK)} | "
            f"{', '.join(getattr(f.shapes, 'REDUCED', f.shapes.BENCH))} |"
        )
    return "\n".join(lines) + "\n"


def device_table() -> str:
    """`tpu_kernels.runtime.devices`: each registered device and the policies its registration gives."""
    from tpu_kernels.runtime import devices
    from tpu_kernels.runtime.sources import helion

    lines = [
        "| device | dispatch key | aliases | benchmark clock | benchmark sizes by default | raw-JAX baseline | device time | Helion backend (`HELION_BACKENDS`) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    yes = {True: "yes", False: "no"}
    for d in devices.all_devices():
        lines.append(
            f"| `{d.name}` | `{d.dispatch_key}` | {_codes(d.aliases)} | `{d.clock}` | {d.bench_sweep} | {yes[d.jax_baseline]} | "
            f"{yes[d.device_time]} | {f'`{helion.HELION_BACKENDS[d.name]}`' if d.name in helion.HELION_BACKENDS else '-'} |"
        )
    return "\n".join(lines) + "\n"


# ---- tolerances -------------------------------------------------------------------------------


def tolerances() -> str:
    """`tpu_kernels.verification.tolerance.TOL`, the tolerance table of checked mode, the tests and the benchmarks."""
    from tpu_kernels.verification.tolerance import TOL

    lines = ["| dtype | rtol | atol |", "|---|---|---|"]
    lines += [
        f"| {str(d).removeprefix('torch.')} | {_number(t.rtol)} | {_number(t.atol)} |" for d, t in TOL.items()
    ]
    return "\n".join(lines) + "\n"


# ---- regions ----------------------------------------------------------------------------------

# The measured figures (README.md, docs/performance.md) come from the records in bench/reports/
# (tpu_kernels/docs_perf.py; `python bench/record.py` measures them again).
GENERATORS: dict[str, Callable[[], str]] = {
    **docs_perf.GENERATORS,
    "tokamax-implementations": tokamax_implementations,
    "tokamax-declarations": tokamax_declarations,
    "tokamax-families": tokamax_families,
    "cli-reference": cli_reference,
    "shipped-ops": shipped_ops,
    "kernel-families": kernel_families,
    "devices": device_table,
    "tolerances": tolerances,
    "tunables": tunables,
}


def pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def regions(text: str) -> list[str]:
    return [m["name"] for m in REGION.finditer(text)]


def render(text: str, cache: dict[str, str] | None = None) -> str:
    """`text` with every generated region rewritten; unknown region names are an error."""
    cache = {} if cache is None else cache

    def body(m: re.Match) -> str:
        name = m["name"]
        if name not in GENERATORS:
            raise KeyError(f"docs_tables: no generator for region {name!r}; known: {', '.join(GENERATORS)}")
        if name not in cache:
            cache[name] = GENERATORS[name]()
        return m[1] + cache[name] + m[4]

    return REGION.sub(body, text)


def stale(root: Path = ROOT) -> list[Path]:
    """The pages whose generated regions differ from what the code gives now."""
    cache: dict[str, str] = {}
    return [
        p for p in pages(root) if regions(p.read_text()) and render(p.read_text(), cache) != p.read_text()
    ]


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only list stale pages; exit 1 if any")
    args = parser.parse_args(argv)
    cache: dict[str, str] = {}
    changed = []
    for page in pages(root):
        text = page.read_text()
        if not regions(text):
            continue
        new = render(text, cache)
        if new != text:
            changed.append(page)
            if not args.check:
                page.write_text(new)
    for page in changed:
        print(f"{'stale' if args.check else 'rewrote'}: {page.relative_to(root)}")
    if args.check and changed:
        print(f"run `{COMMAND}` to regenerate them")
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
