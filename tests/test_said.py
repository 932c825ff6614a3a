"""Sentences kept as data (guardian_core/said.py): English for the API and the command line,
the reader's language and notation on a page, and a plain string shown as it is."""

import json

from django.utils import translation

from guardian_core.said import english, figure, percent, said, said_count, texts, worded


def _reason() -> dict:
    return said(
        "%(name)s: calibration worsens beyond %(tolerance)s (ECE %(current)s → %(candidate)s)",
        name="integrity",
        tolerance=percent(0.05),
        current=figure(0.01234),
        candidate=figure(0.2),
    )


def test_an_entry_keeps_its_english_and_survives_json():
    entry = json.loads(json.dumps(_reason()))

    assert entry["text"] == "integrity: calibration worsens beyond 5% (ECE 0.0123 → 0.2000)"
    assert english(entry) == entry["text"]


def test_a_french_reader_gets_the_french_template_and_french_numbers():
    entry = json.loads(json.dumps(_reason()))

    with translation.override("fr"):
        words = worded(entry)

    assert words == (
        "integrity\xa0: l’étalonnage se dégrade au-delà de 5\xa0% (ECE 0,0123 → 0,2000)"
    )
    # The condition's name is data, not a word to translate.
    assert words.startswith("integrity\xa0")


def test_plurals_follow_the_count_in_each_language():
    one = said_count("example %(ids)s", "examples %(ids)s", 1, ids="7")
    three = said_count("example %(ids)s", "examples %(ids)s", 3, ids="7, 8, 9")

    assert (english(one), english(three)) == ("example 7", "examples 7, 8, 9")
    with translation.override("fr"):
        assert (worded(one), worded(three)) == ("exemple 7", "exemples 7, 8, 9")


def test_entries_nest_and_lists_join_with_commas():
    counts = [
        said_count("%(signed)s review", "%(signed)s reviews", 1, signed="+1"),
        said_count("%(signed)s miss", "%(signed)s misses", 2, signed="-2"),
    ]
    entry = said(
        "expected cost per example worsens beyond %(tolerance)s: %(current)s → %(candidate)s",
        tolerance=percent(0.05),
        current=figure(0.5),
        candidate=figure(-0.25, 2, signed=True),
    )
    outer = said("%(words)s (within the noise)", words=entry)

    assert english(counts) == "+1 review, -2 misses"
    assert english(outer) == (
        "expected cost per example worsens beyond 5%: 0.5000 → -0.25 (within the noise)"
    )
    with translation.override("fr"):
        assert worded(counts) == "+1 relecture, -2 manqués"
        assert worded(outer) == (
            "le coût attendu par exemple se dégrade au-delà de 5\xa0%\xa0: 0,5000 → -0,25 "
            "(dans le bruit)"
        )


def test_a_tolerance_reads_in_four_significant_digits_without_trailing_zeros():
    assert english(figure(0.05, None)) == "0.05"
    assert english(figure(0.00123456, None)) == "0.001235"
    with translation.override("fr"):
        assert worded(figure(0.05, None)) == "0,05"


def test_a_plain_string_recorded_before_is_shown_as_it_is():
    recorded = "integrity: calibration worsens beyond 5% (ECE 0.0123 → 0.2000)"

    with translation.override("fr"):
        assert worded(recorded) == recorded
    assert texts([recorded, _reason()]) == [recorded, _reason()["text"]]


def test_a_template_word_in_a_parameter_is_not_a_format_string():
    # Someone else's words (an exception's text) may hold "%": they are a value, never a
    # template, so they cannot break or steer the formatting.
    entry = said("cannot ask the current guardian: %(error)s", error="100%(x)s done %")

    assert english(entry) == "cannot ask the current guardian: 100%(x)s done %"
    with translation.override("fr"):
        assert worded(entry) == "impossible d’interroger le gardien en service\xa0: 100%(x)s done %"
