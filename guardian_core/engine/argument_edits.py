"""What a reviewer changed in a held call's arguments before approving it: the per-field change
list, and the words every page and export says it with ("amount 49.9 → 39.9")."""

import json
from collections.abc import Iterable
from dataclasses import dataclass

from guardian_core.engine.canonical import canonical_json

# A value longer than this is cut where it is said in words (the change list keeps it whole):
# arguments are untrusted and a sentence about them must stay a sentence.
VALUE_WORDS_CHARS = 120
ABSENT = "(absent)"


@dataclass(frozen=True)
class ArgumentChange:
    """One field the reviewer changed: its path ("amount", "address.city"), and its value
    before and after. A field the reviewer added has no `before`, one removed no `after`."""

    field: str
    before: object = None
    after: object = None
    had_before: bool = True
    has_after: bool = True

    def as_dict(self) -> dict:
        """The change as JSON: {"field", "before", "after"}, a missing side left out."""
        out: dict = {"field": self.field}
        if self.had_before:
            out["before"] = self.before
        if self.has_after:
            out["after"] = self.after
        return out

    def words(self) -> str:
        """ "amount 49.9 → 39.9"; a field added or removed says "(absent)" on its empty side."""
        before = _value_words(self.before) if self.had_before else ABSENT
        after = _value_words(self.after) if self.has_after else ABSENT
        return f"{self.field} {before} → {after}"


def argument_changes(original: object, edited: object, *, path: str = "") -> list[ArgumentChange]:
    """Every field that differs between the proposed arguments and the approved ones, in key
    order; nested objects are compared field by field, anything else (lists, numbers, text)
    as a whole value. Values are compared as canonical JSON, so true and 1 differ, as they do
    for the tool's schema. Equal arguments give []."""
    if isinstance(original, dict) and isinstance(edited, dict):
        changes = []
        for key in sorted(set(original) | set(edited), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in edited:
                changes.append(ArgumentChange(where, before=original[key], has_after=False))
            elif key not in original:
                changes.append(ArgumentChange(where, after=edited[key], had_before=False))
            else:
                changes += argument_changes(original[key], edited[key], path=where)
        return changes
    if _same(original, edited):
        return []
    return [ArgumentChange(path or "(arguments)", before=original, after=edited)]


def changes_words(changes: Iterable[ArgumentChange]) -> str:
    """ "amount 49.9 → 39.9, note (absent) → "refund"": the changes in one line."""
    return ", ".join(change.words() for change in changes)


def edited_arguments_words(
    original: object, edited: object, *, tool: str = "", position: int | None = None
) -> str:
    """The sentence a verdict carries when a reviewer edited a call before approving it:
    "approved with edited arguments: amount 49.9 → 39.9", naming the call when given
    ("call 0 (issue_refund) approved with edited arguments: ..."); "" when nothing changed."""
    changes = argument_changes(original, edited)
    if not changes:
        return ""
    call = ""
    if position is not None:
        call = f"call {position}" + (f" ({tool})" if tool else "") + " "
    elif tool:
        call = f"{tool} "
    return f"{call}approved with edited arguments: {changes_words(changes)}"


def _same(a: object, b: object) -> bool:
    try:
        return canonical_json(a) == canonical_json(b)
    except (TypeError, ValueError):  # not JSON (NaN in an old row): compare as Python does
        return a == b


def _value_words(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    if len(text) > VALUE_WORDS_CHARS:
        text = text[: VALUE_WORDS_CHARS - 1] + "…"
    return text
