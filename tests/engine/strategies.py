"""Hypothesis strategies for guardian answers, well-formed and malformed."""

import math

from hypothesis import strategies as st

from guardian_core.engine.conditions import DRIFT_SCORES, Condition, Malformed, RiskClass

probabilities = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
garbage = st.one_of(
    st.none(),
    st.just(math.nan),
    st.just(math.inf),
    st.floats(min_value=1.0001, max_value=1e9),
    st.floats(max_value=-0.0001, min_value=-1e9),
    st.booleans(),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=3),
    st.builds(Malformed, st.text(max_size=10)),
)


def _distribution(keys):
    weights = st.lists(
        st.floats(min_value=0.0, max_value=1.0, allow_nan=False),
        min_size=len(keys),
        max_size=len(keys),
    ).filter(lambda ws: sum(ws) > 0)
    return weights.map(lambda ws: {k: w / math.fsum(ws) for k, w in zip(keys, ws, strict=True)})


risk_distributions = _distribution([c.value for c in RiskClass])
drift_distributions = _distribution([str(s) for s in DRIFT_SCORES])
broken_distributions = st.one_of(
    st.dictionaries(st.text(max_size=4), probabilities, max_size=4),
    _distribution([c.value for c in RiskClass]).map(lambda d: {**d, "read_only": 2.0}),
)


def answer_for(condition: Condition, *, allow_malformed: bool = True):
    if condition == Condition.RISK:
        good = risk_distributions
    elif condition == Condition.DRIFT:
        good = drift_distributions
    else:
        good = probabilities
    return st.one_of(good, garbage, broken_distributions) if allow_malformed else good


def answers(*, allow_malformed: bool = True, conditions=tuple(Condition)):
    """A mapping condition → raw answer; conditions may be missing when malformed is allowed."""
    fixed = st.fixed_dictionaries(
        {c.value: answer_for(c, allow_malformed=allow_malformed) for c in conditions}
    )
    if not allow_malformed:
        return fixed
    return fixed.flatmap(
        lambda full: st.sets(st.sampled_from(sorted(full))).map(
            lambda dropped: {k: v for k, v in full.items() if k not in dropped}
        )
    )
