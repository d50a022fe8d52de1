"""Generic mutation operators for a user's kernel file: each match of a pattern is one mutant.

Every operator is a regular expression and its replacement, applied to one match at a time
(a file with three `pl.cdiv(` calls gives three mutants). They model the bugs issue #16 saw
kernel authors make; a mutant whose edit leaves the text unchanged is dropped.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from tpu_kernels.mutate.catalogue import Mutation

# (name, pattern, replacement, why)
OPERATORS: tuple[tuple[str, str, str, str], ...] = (
    (
        "low-precision",
        r"jnp\.promote_types\(([^,()]+(?:\([^()]*\))?[^,()]*), jnp\.float32\)",
        r"\1",
        "arithmetic in the input's dtype instead of float32",
    ),
    ("drop-upcast", r"\.astype\(jnp\.float32\)", "", "an operand left in its low-precision dtype"),
    (
        "no-preferred-element-type",
        r",\s*preferred_element_type=[\w.\[\]]+",
        "",
        "a dot without a float32 result type",
    ),
    ("f32-to-bf16", r"jnp\.float32", "jnp.bfloat16", "a float32 buffer or accumulator made bfloat16"),
    (
        "arbitrary-to-parallel",
        r'"arbitrary"',
        '"parallel"',
        "a sequential (accumulation) axis marked parallel",
    ),
    (
        "floor-grid",
        r"pl\.cdiv\(([^,()]+), ([^()]+?)\)",
        r"(\1 // \2)",
        "a floor grid: the last partial block skipped",
    ),
    ("drop-eps", r"\s*\+\s*eps\b", "", "eps dropped"),
    (
        "no-max-subtraction",
        r"jnp\.exp\((\w+) - jnp\.max\([^()]*\)\)",
        r"jnp.exp(\1)",
        "exp without max-subtraction: overflow for large inputs",
    ),
    (
        "index-map-off-by-one",
        r"(lambda [\w, ]+: \()(\w+)(?=[,)])",
        r"\1\2 + 1",
        "an index map's first block index off by one",
    ),
    ("when-first-step", r"pl\.when\((\w+) == 0\)", r"pl.when(\1 == 1)", "an init step that is not the first"),
    ("keepdims", r"keepdims=True", "keepdims=False", "a reduction that drops its dimension"),
    ("axis", r"axis=-1", "axis=0", "a reduction over the wrong axis"),
    (
        "oversized-default-block",
        r"(block_\w+: int = )(\d+)",
        lambda m: f"{m.group(1)}{int(m.group(2)) * 8}",
        "a default block 8x larger (VMEM)",
    ),
    ("sign", r"(?<=[\w)\]]) - (?=[\w(])", " + ", "a subtraction turned into an addition"),
)


# Operators whose target is a whole string literal (dimension semantics are strings), never
# text inside a docstring.
_IN_STRINGS = {"arbitrary-to-parallel"}


def _spans(text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Character ranges of the file's comments and of its string literals (docstrings included):
    a mutant there changes no code."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    comments, strings = [], []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.STRING):
            span = (starts[tok.start[0] - 1] + tok.start[1], starts[tok.end[0] - 1] + tok.end[1])
            (comments if tok.type == tokenize.COMMENT else strings).append(span)
    return comments, strings


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    return any(a <= pos < b for a, b in spans)


def generate(
    path: Path, root: Path, *, tests: tuple[str, ...], check: tuple[str, ...] | None, races: bool = False
) -> list[Mutation]:
    """The mutants the operators make of `path` (a file under `root`)."""
    text = path.read_text()
    rel = str(path.resolve().relative_to(root.resolve()))
    comments, strings = _spans(text)
    out: list[Mutation] = []
    for name, pattern, repl, why in OPERATORS:
        matches = [
            m
            for m in re.finditer(pattern, text)
            if not _inside(m.start(), comments)
            and ((m.start(), m.end()) in strings if name in _IN_STRINGS else not _inside(m.start(), strings))
        ]
        for n, m in enumerate(matches):
            new = m.expand(repl) if isinstance(repl, str) else repl(m)
            if new == m.group(0):
                continue
            # The edit as an exact-once text replacement: widen the match with its line until unique.
            start, end = m.start(), m.end()
            line_start = text.rfind("\n", 0, start) + 1
            line_end = text.find("\n", end)
            line_end = len(text) if line_end < 0 else line_end
            old_text = text[line_start:line_end]
            new_text = text[line_start:start] + new + text[end:line_end]
            lo, hi = line_start, line_end
            while text.count(old_text) > 1 and (lo > 0 or hi < len(text)):
                lo = text.rfind("\n", 0, max(lo - 1, 0)) + 1 if lo > 0 else 0
                hi = text.find("\n", hi + 1) if hi < len(text) else hi
                hi = len(text) if hi < 0 else hi
                old_text = text[lo:hi]
                new_text = text[lo:start] + new + text[end:hi]
            line = text.count("\n", 0, start) + 1
            out.append(
                Mutation(
                    f"{name}@{Path(rel).name}:{line}" + (f"#{n}" if n else ""),
                    rel,
                    old_text,
                    new_text,
                    why,
                    tests,
                    check=check,
                    races=races and name == "arbitrary-to-parallel",
                )
            )
    return out
