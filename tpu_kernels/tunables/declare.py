"""What an op may tune: `tune=` and `tune_key=` of `@tpu_kernel`, checked once into `Tunables`.

    @tpu_kernel("mylib::rownorm", tune={"block_rows": [128, 256, 512]})
    def rownorm(x: torch.Tensor, *, block_rows: int = 256) -> torch.Tensor: ...

A tunable is a static parameter with a default (the declared default, what a call gets when
nothing is tuned); its candidates are values of the parameter's type (None too for an
`Optional` one, e.g. `block_rows: int | None = None` where None means "the kernel sizes it"). `tune` is either a dict
of candidate lists (every combination is a candidate config, as Helion's config space and
Tokamax's `autotuning_configs` are products of per-parameter choices) or a list of configs
(dicts, as Triton's `@autotune(configs=[...])`; a config may leave a tunable at its default).
The default config is always a candidate, and the first one: ties go to it.

`tune_key` says which calls share a tuned config: a function of the op's arguments by keyword
(tensors as tensors, or fake tensors under torch.compile) returning a tuple of ints and strings,
the call's *shape bucket*. By default every tensor's dims, each rounded up to a power of two
(`bucket`), so 300 rows and 500 rows share the 512-row entry. The key must be a function of
shapes and statics, never of tensor values: under torch.compile it runs at trace time.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpu_kernels.definition.signature import Kind, Param, Signature
from tpu_kernels.errors import OpDefinitionError

Config = tuple  # one value per tunable, in `Tunables.names` order

# the schema types a tunable may have, and the Python types their candidates may be
_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (float, int), "bool": (bool,), "str": (str,)}


def bucket(n: Any) -> Any:
    """`n` rounded up to a power of two (0 and 1 stay themselves): the default shape bucket
    of one dim. Written as a loop of comparisons so that under torch.compile a symbolic size
    gets a range guard (`129 <= s0 <= 256`), not a specialisation to one size (Dynamo takes a
    symbolic size for an int, so no fast path for ints: `bit_length` would specialise). Eager
    calls reach it once per shapes (the lookup's memo)."""
    b = 1
    while b < n:
        b *= 2
    return b if n > 1 else n


def default_key(tensors: Sequence[Any]) -> tuple:
    """Every tensor's dims rounded up by `bucket` (None for an absent optional tensor, a tuple
    per list of tensors)."""
    out = []
    for t in tensors:
        if t is None:
            out.append(None)
        elif isinstance(t, (list, tuple)):
            out.append(tuple(tuple(bucket(d) for d in x.shape) for x in t))
        else:
            out.append(tuple(bucket(d) for d in t.shape))
    return tuple(out)


@dataclass(frozen=True)
class Tunables:
    """An op's tunable statics, checked: their names (signature order), the candidate configs
    (declared order, the default first, no repeats) and the optional key function."""

    op: str
    names: tuple[str, ...]
    configs: tuple[Config, ...]
    default: Config
    key: Callable[..., tuple] | None = None
    # each tunable's (parameter index, keyword-only): where a call passes it
    slots: tuple[tuple[int, bool], ...] = ()

    def as_dict(self, config: Config) -> dict[str, Any]:
        return dict(zip(self.names, config))

    def config_of(self, values: Mapping[str, Any]) -> Config:
        """A config from a mapping of tunable values (missing ones at their default)."""
        return tuple(values.get(n, d) for n, d in zip(self.names, self.default))

    def space(self) -> dict[str, list[Any]]:
        """Each tunable's candidate values, in first-seen order (what a table records)."""
        return {n: list(dict.fromkeys(c[i] for c in self.configs)) for i, n in enumerate(self.names)}

    def describe(self, config: Config) -> str:
        return ", ".join(f"{n}={v!r}" for n, v in zip(self.names, config))

    def check_value(self, name: str, value: Any) -> bool:
        """Is `value` a value this tunable's parameter takes (for a table's entries)?"""
        i = self.names.index(name)
        return any(c[i] == value and type(c[i]) is type(value) for c in self.configs) or (
            self.default[i] == value and type(self.default[i]) is type(value)
        )


def declare(op: str, sig: Signature, tune: Any, tune_key: Callable[..., tuple] | None) -> Tunables | None:
    """The op's `Tunables` from its `tune=` and `tune_key=` options, or None without `tune`;
    an OpDefinitionError naming the op and the option for anything that cannot be tuned."""
    if tune is None:
        if tune_key is not None:
            raise OpDefinitionError(f"{op}: tune_key= without tune=; declare the tunables with tune={{...}}.")
        return None
    params = {p.name: (i, p) for i, p in enumerate(sig.params)}
    if isinstance(tune, Mapping):
        if not tune:
            raise OpDefinitionError(f"{op}: tune={{}} declares no tunable.")
        names = _names(op, params, tune.keys())
        choices = []
        for n in names:
            values = tune[n]
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
                raise OpDefinitionError(
                    f"{op}: tune[{n!r}] must be a non-empty list of candidate values, got {values!r}."
                )
            choices.append([_value(op, params[n][1], v) for v in values])
        raw = list(itertools.product(*choices))
    elif isinstance(tune, Sequence) and not isinstance(tune, (str, bytes)):
        if not tune or not all(isinstance(c, Mapping) for c in tune):
            raise OpDefinitionError(
                f"{op}: tune= must be a dict of candidate lists ({{'block_rows': [128, 256]}}) or a "
                f"non-empty list of config dicts ([{{'block_rows': 128}}, ...]), got {tune!r}."
            )
        names = _names(op, params, dict.fromkeys(k for c in tune for k in c))
        raw = [
            tuple(_value(op, params[n][1], c[n]) if n in c else params[n][1].default for n in names)
            for c in tune
        ]
    else:
        raise OpDefinitionError(
            f"{op}: tune= must be a dict of candidate lists or a list of config dicts, got {tune!r}."
        )
    if tune_key is not None and not callable(tune_key):
        raise OpDefinitionError(
            f"{op}: tune_key= must be a function of the op's arguments, got {tune_key!r}."
        )
    if tune_key is not None:
        _check_key_parameters(op, tune_key, [p.name for p in sig.params])
    default = tuple(params[n][1].default for n in names)
    configs = tuple(dict.fromkeys([default, *raw]))
    slots = tuple((params[n][0], params[n][1].keyword_only) for n in names)
    return Tunables(op, names, configs, default, tune_key, slots)


def _names(op: str, params: dict[str, tuple[int, Param]], given: Any) -> tuple[str, ...]:
    for n in given:
        if n not in params:
            raise OpDefinitionError(
                f"{op}: tune= names {n!r}, which is not a parameter of the kernel "
                f"(its parameters: {', '.join(params)})."
            )
        p = params[n][1]
        if p.kind is not Kind.STATIC:
            raise OpDefinitionError(
                f"{op}: tune= names {n!r}, a tensor parameter; only statics (compile-time values such "
                "as block sizes) can be tuned."
            )
        if p.schema_type.removesuffix("?") not in _TYPES:
            raise OpDefinitionError(
                f"{op}: tune= names {n!r} of type {p.schema_type}; tunables are int, float, bool or str "
                "statics."
            )
        if p.default is inspect.Parameter.empty:
            raise OpDefinitionError(
                f"{op}: tunable {n!r} has no default; give it one (the value a call gets when nothing "
                "is tuned)."
            )
    return tuple(sorted(given, key=lambda n: params[n][0]))


def _value(op: str, p: Param, v: Any) -> Any:
    base = p.schema_type.removesuffix("?")
    if v is None and p.schema_type.endswith("?"):
        return None
    types = _TYPES[base]
    if isinstance(v, bool) and bool not in types or not isinstance(v, types):
        raise OpDefinitionError(
            f"{op}: tune= gives {p.name!r} the candidate {v!r}; {p.name} is a {p.schema_type} static."
        )
    if base == "float":
        v = float(v)
        if not math.isfinite(v):
            raise OpDefinitionError(f"{op}: tune= gives {p.name!r} the non-finite candidate {v!r}.")
    return v


def _check_key_parameters(op: str, fn: Callable, names: list[str]) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        raise OpDefinitionError(f"{op}: tune_key={fn!r} has no readable signature.") from e
    kinds = inspect.Parameter
    if any(p.kind is kinds.VAR_KEYWORD for p in sig.parameters.values()):
        return
    unknown = [
        p.name
        for p in sig.parameters.values()
        if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY) and p.name not in names
    ]
    positional = [p.name for p in sig.parameters.values() if p.kind is kinds.POSITIONAL_ONLY]
    if unknown or positional:
        raise OpDefinitionError(
            f"{op}: tune_key{sig} takes {', '.join(map(repr, unknown or positional))}, which "
            f"{'is not a parameter' if unknown else 'cannot be passed by name'}; it is called with the "
            f"op's arguments by keyword ({', '.join(names)}), e.g. `lambda x: (x.shape[-1],)`."
        )


def key_arguments(fn: Callable, values: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments `fn` (a tune_key) takes, from the call's values by name."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(values)
    return {p.name: values[p.name] for p in params if p.name in values}
