"""What a kernel is written in: a JAX/Pallas function, or a Helion kernel.

A source gives the op everything that depends on the language:

- `signature_fn`: the function whose signature becomes the op's schema;
- `jax_body`: the kernel as a JAX function of keyword arguments (one per
  parameter) - what the fake function (`jax.eval_shape`), a derived backward
  (`jax.vjp`) and the raw-JAX benchmark baseline use;
- `lowering_body`: the same for the TPU lowering check (for Helion, the TPU
  variant rather than the interpret-mode one);
- `kernels(...)`: the op's kernel per dispatch key (CPU, CUDA, PrivateUse1=TPU).

Each language is registered below (`Language`): how to recognise a kernel written in
it, how to make its source, and the folder name of its template variants
(`templates/<t>/<backend>/`, what `tpu-kernels new --backend` takes). Adding a kernel
language means one module here plus its registration (docs/adding-a-device.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

from tpu_kernels import wiring
from tpu_kernels.runtime.cache import CacheInfo


class Source(Protocol):
    kind: str
    signature_fn: Callable
    jax_body: Callable
    lowering_body: Callable

    def kernels(self, spec: Any) -> dict[str, Callable]:
        """The op's kernel per dispatch key, from its finished spec (tpu_kernels.spec.OpSpec)."""
        ...

    def cached_devices(self) -> tuple[str, ...]:
        """The registered devices (by name) whose calls tpu_kernels' own compile cache serves."""
        ...

    def cache_info(self, device: str) -> CacheInfo: ...

    def cache_clear(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class Language:
    name: str  # "jax", "helion"
    module: str  # the module with `recognizes(fn)` and `make_source(op_name, fn, options)`
    template_backend: str  # its templates' variant folder ("pallas", "helion")


# In the order they are asked; the last, JAX, takes any callable (a plain function is a
# JAX function), so a new language goes before it.
_LANGUAGES: list[Language] = [
    Language("helion", "tpu_kernels.runtime.sources.helion", "helion"),
    Language("jax", "tpu_kernels.runtime.sources.jax", "pallas"),
]


def register(language: Language) -> Language:
    """Add a kernel language, asked before JAX (the catch-all)."""
    if any(lang.name == language.name for lang in _LANGUAGES):
        raise ValueError(f"kernel language {language.name!r} is already registered.")
    _LANGUAGES.insert(len(_LANGUAGES) - 1, language)
    return language


def languages() -> list[Language]:
    return list(_LANGUAGES)


def template_backends() -> tuple[str, ...]:
    """The template variant folders, one per language (scaffold's backends)."""
    return tuple(lang.template_backend for lang in reversed(_LANGUAGES))


def _language_of(fn: Any) -> tuple[Language, Any]:
    for lang in _LANGUAGES:
        module = wiring.registered(lang.module)
        if module.recognizes(fn):
            return lang, module
    raise AssertionError("unreachable: the JAX language recognises every function")  # pragma: no cover


def from_function(fn: Any) -> str:
    """The name of the language `fn` is written in: "helion" for a helion.Kernel, else "jax"."""
    return _language_of(fn)[0].name


def make_source(op_name: str, fn: Any, options: Any = None) -> Source:
    """The source of the op `op_name` for the kernel `fn`, by the language it is written in;
    `options` (tpu_kernels.definition.options.OpOptions, default: none given) carries the language's
    settings (`autotune`, `float_only`), refused by a language they do not apply to."""
    from tpu_kernels.definition.options import OpOptions

    return _language_of(fn)[1].make_source(op_name, fn, options or OpOptions())
