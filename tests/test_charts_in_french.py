"""Charts keep their geometry in every language: an SVG attribute is a number in the SVG
grammar (0.5), never in the reader's notation (0,5), which a browser drops, leaving the bar
empty. Figures in the charts' text alternatives are the reader's (0,5)."""

import re
from html.parser import HTMLParser

import pytest
from django.urls import reverse

from tests.factories import make_decision, make_escalation, make_turn

pytestmark = pytest.mark.django_db

# Attributes that hold one length; the ones holding lists are read number by number.
_ONE = {"x", "y", "width", "height", "x1", "x2", "y1", "y2", "cx", "cy", "r", "rx", "ry"}
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE]-?\d+)?(em|px|%)?")


def _is_geometry(name: str, value: str) -> bool:
    """Whether an attribute holds what SVG reads; True for one that is not geometry."""
    if name in _ONE:
        return bool(_NUMBER.fullmatch(value))
    if name == "viewbox":
        return all(_NUMBER.fullmatch(v) for v in value.split())
    if name == "points":
        pairs = [pair.split(",") for pair in value.split()]
        return all(len(xy) == 2 and all(_NUMBER.fullmatch(v) for v in xy) for xy in pairs)
    return True


class _Geometry(HTMLParser):
    """Every SVG attribute that is not a number in the SVG grammar, as (tag, name, value)."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.seen = 0
        self.bad: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "svg":
            self.depth += 1
            self.seen += 1
        if not self.depth:
            return
        for name, value in attrs:
            if not _is_geometry(name, value or ""):
                self.bad.append((tag, name, value))

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.depth -= 1


def _geometry(page: str) -> _Geometry:
    parser = _Geometry()
    parser.feed(page)
    return parser


def _queue_with_a_probability() -> str:
    make_escalation(
        kind="uncertain",
        reason={
            "triggered": [
                {
                    "source": "integrity",
                    "band": "uncertain",
                    "outcome": "escalate",
                    "detail": "p=0.550 is within δ=0.05 of t*=0.525",
                    "value": 0.55,
                    "t_star": 0.525,
                    "delta": 0.05,
                }
            ]
        },
    )
    return reverse("escalations:queue")


def _reason(value: float) -> dict:
    return {
        "source": "integrity",
        "band": "fired" if value > 0.525 else "clear",
        "outcome": "escalate" if value > 0.525 else "continue",
        "detail": f"p={value:.3f}",
        "value": value,
        "t_star": 0.525,
        "delta": 0.05,
    }


def _run_with_answers() -> str:
    first = make_decision(answers={"integrity": 0.35}, reasons=[_reason(0.35)])
    make_decision(
        turn=make_turn(run=first.turn.run, index=1),
        answers={"integrity": 0.675},
        reasons=[_reason(0.675)],
    )
    return reverse("runs:detail", args=[first.turn.run_id])


@pytest.mark.parametrize("language", ["en", "fr"])
@pytest.mark.parametrize(
    ("persona", "url"),
    [
        ("admin", lambda: reverse("policies:new")),
        ("admin", lambda: reverse("policies:monitoring")),
        ("reviewer", _queue_with_a_probability),
        ("auditor", _run_with_answers),
    ],
    ids=[
        "policy editor's band bars",
        "monitoring charts",
        "queue's probability bars",
        "run page's chart",
    ],
)
def test_every_chart_keeps_its_geometry_in_the_readers_language(
    request, client, persona, url, language
):
    make_decision(answers={"integrity": 0.3})  # a day of traffic for the monitoring charts
    client.force_login(request.getfixturevalue(persona))

    page = client.get(url(), headers={"accept-language": language}).content.decode()

    geometry = _geometry(page)
    assert geometry.seen, "the page drew no chart"
    assert geometry.bad == []
