"""Which measured candidate wins: the fastest median, unless the timings cannot tell.

Each candidate's samples (interleaved rounds, `bench.timing.measure`) give a median and a
spread (p10-p90). One candidate is *decisively faster* than another when its p90 is below the
other's p10: the spreads do not overlap, so the difference is more than this run's noise. The
candidates no other candidate is decisively faster than (p10 at most the smallest p90) are
tied, and the tie goes to the first of them in the op's declared order, which starts with the
declared default. So the fastest median wins outright when it is decisively faster than every
other; tuning never moves an op off its default on noise, never keeps a candidate something is
decisively faster than, and the same timings always give the same choice.

Predicted rankings (`predict.py`) have no spread: the fastest prediction wins, ties by declared
order too. Predictions tie when equal to 1e-12 relative, or within the op's own cost model's
resolution (`cost=`'s `tie`: matmul's 3%, `blocks.TIE`); such a model may also say how its ties
go (`cost=`'s `prefer`: matmul's `blocks.preference`, the largest output block first), ahead of
the declared order, so that the prediction breaks a tie as the op's default rule does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpu_kernels.bench.stats import Summary


@dataclass(frozen=True)
class Choice:
    config: Any  # the winner
    tied: tuple  # every candidate nothing is decisively faster than (the winner first), declared order
    decisive: bool  # one candidate was decisively faster than every other


def choose(order: Sequence[Any], timings: Mapping[Any, Summary]) -> Choice:
    """The winner among `timings` (config -> Summary); `order`: the declared order of configs."""
    if not timings:
        raise ValueError("choose: no measured candidate")
    rank = {c: i for i, c in enumerate(order)}
    ceiling = min(t.p90 for t in timings.values())
    tied = tuple(
        sorted((c for c in timings if timings[c].p10 <= ceiling), key=lambda c: rank.get(c, len(rank)))
    )
    return Choice(tied[0], tied, decisive=len(tied) == 1)


def choose_predicted(order: Sequence[Any], predicted: Mapping[Any, float], tie: float = 1e-12,
                     prefer: Mapping[Any, tuple] | None = None) -> Choice:
    """The winner of a predicted ranking (config -> seconds); predictions within `tie` (relative)
    of the fastest tie, and the tie goes by `prefer` (config -> key, least first: the op's cost
    model's own tie rule, `cost=`'s `prefer`; a config without a key after those with one), then
    by declared order."""
    if not predicted:
        raise ValueError("choose_predicted: no candidate")
    rank = {c: i for i, c in enumerate(order)}
    prefer = prefer or {}
    best = min(predicted.values())
    tied = tuple(
        sorted(
            (c for c, t in predicted.items() if t <= best * (1 + max(tie, 1e-12))),
            key=lambda c: ((0, prefer[c]) if c in prefer else (1, ()), rank.get(c, len(rank))),
        )
    )
    return Choice(tied[0], tied, decisive=len(tied) == 1)
