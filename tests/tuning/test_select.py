"""The choice among measured candidates: decisive timings pick the fastest, ties keep the
declared order (the default first), and the same timings always give the same choice."""

from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_kernels.autotuner.select import choose, choose_predicted
from tpu_kernels.bench.stats import Summary


def _s(median, spread=0.02):
    return Summary.of([median * (1 - spread), median, median * (1 + spread)])


def test_a_decisive_fastest_wins():
    c = choose(["d", "a", "b"], {"d": _s(1.0), "a": _s(0.5), "b": _s(0.8)})
    assert (c.config, c.decisive, c.tied) == ("a", True, ("a",))


def test_overlapping_spreads_are_a_tie_and_the_declared_order_decides():
    # b's median is lowest, but its spread overlaps the default's: the default stays
    c = choose(["d", "a", "b"], {"d": _s(1.0, 0.2), "a": _s(2.0), "b": _s(0.95, 0.2)})
    assert (c.config, c.decisive) == ("d", False)
    assert c.tied == ("d", "b")
    # without the default among the tied, the first tied in declared order
    c = choose(["d", "a", "b"], {"d": _s(3.0), "a": _s(1.0, 0.2), "b": _s(0.97, 0.2)})
    assert (c.config, c.tied) == ("a", ("a", "b"))


def test_a_tied_default_is_not_kept_when_another_is_decisively_faster_than_it():
    # the fastest median (a) is noisy enough to overlap the default, but b is decisively
    # faster than the default: the default is out, and a and b tie
    timings = {"d": _s(1.35, 0.01), "a": _s(1.0, 0.5), "b": _s(1.05, 0.0)}
    c = choose(["d", "a", "b"], timings)
    assert "d" not in c.tied and c.config == "a"


def test_equal_predictions_go_to_the_declared_order():
    assert choose_predicted(["d", "a", "b"], {"a": 1.0, "b": 1.0, "d": 2.0}).config == "a"
    assert choose_predicted(["d", "a", "b"], {"a": 1.0, "b": 0.5, "d": 2.0}).config == "b"


def test_a_cost_models_preference_breaks_its_ties_before_the_declared_order():
    """`prefer` (the op's cost model's own tie rule, least first) orders the tied predictions;
    the declared order breaks what it leaves equal; a prediction outside the tie never wins."""
    predicted = {"d": 1.02, "a": 1.0, "b": 1.01, "c": 1.2}
    prefer = {"d": (1,), "a": (2,), "b": (0,), "c": (-5,)}
    got = choose_predicted(["d", "a", "b", "c"], predicted, 0.03, prefer)
    assert got.config == "b" and got.tied == ("b", "d", "a")
    assert choose_predicted(["d", "a", "b"], {"d": 1.0, "a": 1.0, "b": 1.0}, 0.0, {"d": (1,), "a": (0,), "b": (0,)}).tied == ("a", "b", "d")
    assert choose_predicted(["d", "a", "b", "c"], predicted, 0.03).config == "d"  # no preference: declared order
    # a tied config the model gave no key goes after those it did, whatever its declared place
    assert choose_predicted(["d", "a", "b"], {"d": 1.0, "a": 1.0, "b": 1.0}, 0.0, {"a": (5,), "b": (7,)}).tied == ("a", "b", "d")


def test_predictions_within_a_cost_models_tie_go_to_the_declared_order():
    """An op's own cost model cannot tell configs within its `tie` apart (matmul's 3%): the
    default keeps its place unless another is priced further below it."""
    assert choose_predicted(["d", "a"], {"d": 1.02, "a": 1.0}, tie=0.03).config == "d"
    assert choose_predicted(["d", "a"], {"d": 1.04, "a": 1.0}, tie=0.03).config == "a"
    assert choose_predicted(["d", "a"], {"d": 1.02, "a": 1.0}).config == "a"  # the roofline's: exact


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 10.0), st.floats(0.0, 0.5)), min_size=1, max_size=6), st.randoms())
def test_the_choice_is_stable_and_never_decisively_slower_than_another(cands, rnd):
    names = [f"c{i}" for i in range(len(cands))]
    timings = {n: _s(m, s) for n, (m, s) in zip(names, cands)}
    shuffled = list(timings.items())
    rnd.shuffle(shuffled)
    c = choose(names, timings)
    assert choose(names, dict(shuffled)) == c  # the dict's order does not matter
    win = timings[c.config]
    # nothing else is decisively faster than the winner: its spread would not overlap
    assert all(not (t.p90 < win.p10) for t in timings.values())
    assert c.config == min(c.tied, key=names.index)


def test_the_tie_ceiling_is_the_smallest_p90_not_the_fastest_median():
    # b's median (0.9) is below the default's p10 (0.95), but b's spread reaches 1.08 and the
    # default's p90 is 1.05: neither is decisively faster, so the default stays, undecided
    timings = {"d": Summary.of([0.95, 1.0, 1.05]), "b": Summary.of([0.72, 0.9, 1.08])}
    assert timings["b"].median < timings["d"].p10 <= min(t.p90 for t in timings.values())
    c = choose(["d", "b"], timings)
    assert (c.config, c.tied, c.decisive) == ("d", ("d", "b"), False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 10.0), st.floats(0.0, 0.5)), min_size=1, max_size=6))
def test_tied_are_exactly_the_candidates_nothing_is_decisively_faster_than(cands):
    names = [f"c{i}" for i in range(len(cands))]
    timings = {n: _s(m, s) for n, (m, s) in zip(names, cands)}
    c = choose(names, timings)
    beaten = {n for n, t in timings.items() if any(o.p90 < t.p10 for o in timings.values())}
    assert c.tied == tuple(n for n in names if n not in beaten)
    assert c.decisive == (len(c.tied) == 1)
