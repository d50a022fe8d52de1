"""Which measured candidate wins: the fastest median, unless the timings cannot tell.

Each candidate's samples (interleaved rounds, `bench.timing.measure`) give a median and a
spread (p10-p90). The fastest median wins outright when its p90 is below every other
candidate's p10: the two spreads do not overlap, so the difference is more than the noise of
this run. Otherwise the candidates whose p10 reaches the fastest's p90 are *tied* with it,
and the tie goes to the first of them in the op's declared order, which starts with the
declared default: tuning never moves an op off its default on noise, and the same timings
always give the same choice.

Predicted rankings (`predict.py`) have no spread: the fastest prediction wins, ties (equal
predictions, to 1e-12 relative) by declared order too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpu_kernels.bench.stats import Summary


@dataclass(frozen=True)
class Choice:
    config: Any  # the winner
    tied: tuple  # every candidate tied with the fastest (the winner among them), declared order
    decisive: bool  # the fastest won outright: its spread overlaps no other's


def choose(order: Sequence[Any], timings: Mapping[Any, Summary]) -> Choice:
    """The winner among `timings` (config -> Summary); `order`: the declared order of configs."""
    if not timings:
        raise ValueError("choose: no measured candidate")
    rank = {c: i for i, c in enumerate(order)}
    fastest = min(timings, key=lambda c: (timings[c].median, rank.get(c, len(rank))))
    ceiling = timings[fastest].p90
    tied = tuple(
        sorted((c for c in timings if timings[c].p10 <= ceiling), key=lambda c: rank.get(c, len(rank)))
    )
    return Choice(tied[0], tied, decisive=tied == (fastest,))


def choose_predicted(order: Sequence[Any], predicted: Mapping[Any, float]) -> Choice:
    """The winner of a predicted ranking (config -> seconds)."""
    if not predicted:
        raise ValueError("choose_predicted: no candidate")
    rank = {c: i for i, c in enumerate(order)}
    best = min(predicted.values())
    tied = tuple(
        sorted(
            (c for c, t in predicted.items() if t <= best * (1 + 1e-12)), key=lambda c: rank.get(c, len(rank))
        )
    )
    return Choice(tied[0], tied, decisive=len(tied) == 1)
