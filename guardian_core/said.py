"""Sentences kept as data: an English template with its names and figures, worded in the
reader's language only when shown.

The gates' reasons are stored (an activation record keeps its report) and read later by people
in either language, by the API and by the command line. A sentence formatted when it is
measured would keep the language of whoever measured; a template and its parameters let each
page look the template up in its own catalogue. makemessages finds the templates by the
keywords `said` and `said_count` (guardian_core/management/commands/makemessages.py).

An entry is JSON: {"said": template, "with": {name: value}, "text": the English}, plus
"plural" and "count" for `said_count`. A value is a string or a number (shown as it is), a
`figure` or `percent` (a number shown in the reader's notation), another entry, or a list of
them (joined with commas). A plain string where an entry is expected (a report recorded
before reasons were kept as data) is shown as it is.
"""

from typing import Any

from django.utils.formats import number_format
from django.utils.translation import gettext, ngettext


def said(template: str, /, **params: Any) -> dict:
    """An entry for `template` (an English sentence with %(name)s placeholders)."""
    entry = {"said": template, "with": params}
    entry["text"] = english(entry)
    return entry


def said_count(singular: str, plural: str, count: int, /, **params: Any) -> dict:
    """An entry whose form follows `count` (ngettext's), which is a parameter too."""
    entry = {"said": singular, "plural": plural, "count": count, "with": {"count": count, **params}}
    entry["text"] = english(entry)
    return entry


def figure(value: float | None, places: int | None = 4, *, signed: bool = False) -> dict:
    """A number shown with `places` decimals (and its sign when `signed`); with None, in at
    most four significant digits and no trailing zero (a tolerance: 0.05, 0.0012)."""
    return {"figure": value, "places": places, "signed": signed}


def percent(value: float | None, places: int = 0) -> dict:
    """A share (0.05) shown as a percentage (5%, 5 % in French)."""
    return {"percent": value, "places": places}


def english(entry: Any) -> str:
    """The entry in English, as the API and the command line give it."""
    return _words(entry, translated=False)


def worded(entry: Any) -> str:
    """The entry in the active language."""
    return _words(entry, translated=True)


def _words(entry: Any, *, translated: bool) -> str:
    if isinstance(entry, list):
        return ", ".join(_words(part, translated=translated) for part in entry)
    if not isinstance(entry, dict):
        return "" if entry is None else str(entry)
    if "figure" in entry:
        return _figure(entry, translated=translated)
    if "percent" in entry:
        return _percent(entry, translated=translated)
    if "said" not in entry:
        return str(entry)
    params = {k: _words(v, translated=translated) for k, v in (entry.get("with") or {}).items()}
    if "plural" in entry:
        template = (
            ngettext(entry["said"], entry["plural"], entry["count"])
            if translated
            else (entry["said"] if entry["count"] == 1 else entry["plural"])
        )
    else:
        template = gettext(entry["said"]) if translated else entry["said"]
    return template % params


def _figure(entry: dict, *, translated: bool) -> str:
    value, places = entry["figure"], entry["places"]
    if value is None:
        return "—"
    sign = "+" if entry.get("signed") else ""
    if places is None:
        value = float(f"{value:.4g}")
        if not translated:
            return f"{value:{sign}g}"
    elif not translated:
        return f"{value:{sign}.{places}f}"
    words = number_format(value, places)
    # number_format has no plus sign; a difference says its direction either way.
    return "+" + words if entry.get("signed") and value >= 0 else words


def _percent(entry: dict, *, translated: bool) -> str:
    value, places = entry["percent"], entry["places"]
    if value is None:
        return "—"
    if not translated:
        return f"{value:.{places}%}"
    # Translators: a percentage; %(number)s is the number (12,5). French puts a space before %.
    return gettext("%(number)s%%") % {"number": number_format(value * 100, places)}


def texts(entries: list | None) -> list[str]:
    """The entries' English, one string each (a report's reasons, as a pipeline reads them)."""
    return [english(entry) for entry in entries or []]
