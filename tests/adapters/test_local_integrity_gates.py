"""The cue gates of the local guardian's integrity segments (adapters/local_integrity.py): each is
a necessary condition of its cue, so skipping a regular expression behind its gate never changes
a cue. Checked on every segment of the training material, real and
generated, and on text built from the cues' own words (pure, no database)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardian_core.adapters import local_integrity as li
from guardian_core.engine.conditions import Condition
from training import fit, sources


def _ungated(text: str) -> list[float]:
    """Each cue as defined: its regular expression, and one of its words where it needs one."""
    present = set(li._WORD.findall(text.lower()))
    out = []
    for j, cue in enumerate(li.CUES):
        needed = li.WORDS_NEEDED.get(j)
        holds = cue.search(text) is not None and (needed is None or not needed.isdisjoint(present))
        out.append(1.0 if holds else 0.0)
    return out


def _mismatches(texts) -> list[tuple[str, list[float], list[float]]]:
    """Segments whose gated cues differ from their regular expressions', the segments of an
    output read together (as answers read them) and each alone."""
    out = []
    for text in texts:
        segments = li.segments(text)
        together = li.read_cues(segments).tolist()
        for segment, gated in zip(segments, together, strict=True):
            ungated = _ungated(segment)
            alone = li.read_segment(segment, words_too=False)[1]
            if gated != ungated or alone != ungated:
                out.append((segment, gated, ungated))
    return out


@pytest.fixture(scope="module")
def training_outputs() -> list[str]:
    examples = [
        *fit.load_examples(Condition.INTEGRITY),
        *sources.real_examples(Condition.INTEGRITY),
    ]
    return [text for e in examples for text in e["projection"]["last_results"]]


def test_no_gate_hides_a_cue_on_any_segment_of_the_training_material(training_outputs):
    assert len(training_outputs) > 5_000
    assert _mismatches(training_outputs)[:5] == []


def test_the_gates_skip_most_regular_expressions_of_an_ordinary_segment():
    # The point of the gates: a line of an ordinary document runs few of the eleven.
    segment = "The parcel left the depot on Monday and was delivered to the front desk."
    lower = segment.lower()
    words = set(li._WORD.findall(lower))
    assert sum(gate(words, lower) for _, (_, gate, _) in li._GATED) <= 1


# Words the cues are made of, mixed with ordinary ones, in any case and with any separators.
_CUE_WORDS = sorted(
    li._AI_WORDS
    | li._ANSWER_NOUNS
    | li._ACT_VERBS
    | li._ACT_OBJECTS
    | li._REQUEST_VERBS
    | li._FORM_WORDS
    | li._CASE_WORDS
    | li._words(
        "your before when if you are re authorized allowed required instructed now hereby "
        "ignore disregard forget set aside the original rules do not don't never tell without "
        "telling no need to ask keep this it between secret silently urgent right away "
        "immediately as soon system user admin override end of tool result output please "
        "kindly could can would must should in into all a an with words link best dear hi "
        "attention note message for language model a.i. e-mail two-factor backwards start "
        "then also first hidden display none color alt= <!-- ## <|im_start|> http://x.io "
        "me@example.org DE89 3704 0044 0532 0130 00 pig latin capital letters"
    )
)
_TEXT = st.lists(
    st.tuples(
        st.sampled_from(_CUE_WORDS),
        st.sampled_from([" ", " ", ", ", ": ", ". ", "\n", "-", "'"]),
        st.booleans(),
    ),
    min_size=3,
    max_size=14,
).map(lambda parts: "".join((w.upper() if up else w) + sep for w, sep, up in parts))


@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_no_gate_hides_a_cue_on_text_made_of_the_cues_words(text):
    assert _mismatches([text]) == []
