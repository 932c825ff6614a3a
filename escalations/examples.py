"""Importing labelled traces (JSON Lines, the trace format of DESIGN.md) as labelled examples
with source `import`: checked line by line as `manage.py evaluate` checks them, stored all or
nothing, never twice.

A line becomes an example with the compared probability the trace gives (absent: unscored),
its label, and its `question_set` and `model` as the versions it was labelled under (empty when
the trace names none). The app's own export (`manage.py export_examples`) reads back as is:
the fields only the export has (reviewer, ids, verdict...) are kept out, as the format says.

"Never twice": an example's content hash is the SHA-256 of its condition, projection, label,
probability, question set and model. A line whose hash any stored labelled example already has,
whatever its source, or an earlier line of the same file had, is counted as a duplicate and not
stored: an export of this database read back into it adds nothing, so no verdict is counted
twice when a model is trained or recalibrated. No column holds the hash (the examples table is
not this module's to change): it is computed over the stored examples of the file's conditions
at each import, under a lock that makes two imports at once queue up.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import connection, transaction

from escalations.models import ExampleSource, LabelledExample
from guardian_core.engine.canonical import sha256_hex
from guardian_core.engine.evaluation import LineProblem, parse_traces

# The examples table's column widths: a longer version name is a malformed line, not a crash.
MAX_QUESTION_SET_CHARS = LabelledExample._meta.get_field("question_set_version").max_length
MAX_MODEL_CHARS = LabelledExample._meta.get_field("model_version").max_length
# Any constant key: only imports take this transaction-scoped advisory lock.
_IMPORT_LOCK = 0x6578_696D  # "exim"
_BATCH = 1000


class ExamplesImportError(ValueError):
    """The file is refused: `problems` lists every malformed line (by line number) or why the
    file as a whole cannot be imported. Nothing was stored."""

    def __init__(self, problems: list[LineProblem | str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problem_text(p) for p in problems))


def problem_text(problem: LineProblem | str) -> str:
    """A problem as a person reads it: "line 3: label: missing", or the file's own."""
    return f"line {problem.line}: {problem.why}" if isinstance(problem, LineProblem) else problem


@dataclass(frozen=True)
class ExamplesImport:
    """What an import did (or, dry, would do): lines read, examples stored, duplicates not
    stored (of earlier imports or earlier lines), blank lines, and per condition how many."""

    lines: int
    imported: int
    duplicates: int
    blank_lines: int
    dry_run: bool
    by_condition: dict[str, int] = field(default_factory=dict)
    example_ids: tuple[int, ...] = ()


def examples_import(*, lines: Iterable[str | bytes], dry_run: bool = False) -> ExamplesImport:
    """Store every line of a trace file as a labelled example with source `import`.

    Raises ExamplesImportError, storing nothing, when any line is malformed (all of them are
    listed, each with every problem) or the file holds no example. With `dry_run` everything
    is checked and counted, duplicates included, and nothing is stored."""
    lines = list(lines)
    parsed = parse_traces(lines)
    problems: list[LineProblem | str] = list(parsed.malformed)
    candidates = []
    for row in parsed.rows:
        data = json.loads(_text(lines[row.line - 1]))
        versions, why = _versions(data)
        if why:
            problems.append(LineProblem(row.line, "; ".join(why)))
            continue
        candidates.append(
            {
                "condition": row.condition.value,
                "projection": row.projection,
                "label": row.label,
                "probability": row.probability,
                **versions,
            }
        )
    if problems:
        raise ExamplesImportError(sorted(problems, key=lambda p: p.line))
    if not candidates:
        raise ExamplesImportError(["the file holds no example (every line is blank)"])
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_IMPORT_LOCK])
        seen = _stored_hashes({c["condition"] for c in candidates})
        new = []
        for candidate in candidates:
            digest = example_hash(candidate)
            if digest not in seen:
                seen.add(digest)
                new.append(candidate)
        by_condition: dict[str, int] = {}
        for candidate in new:
            by_condition[candidate["condition"]] = by_condition.get(candidate["condition"], 0) + 1
        ids: tuple[int, ...] = ()
        if not dry_run:
            created = LabelledExample.objects.bulk_create(
                [
                    LabelledExample(
                        condition=c["condition"],
                        projection=c["projection"],
                        label=c["label"],
                        probability=c["probability"],
                        question_set_version=c["question_set"],
                        model_version=c["model"],
                        source=ExampleSource.IMPORT,
                    )
                    for c in new
                ],
                batch_size=_BATCH,
            )
            ids = tuple(example.pk for example in created)
    return ExamplesImport(
        lines=parsed.lines,
        imported=len(new),
        duplicates=len(candidates) - len(new),
        blank_lines=parsed.blank_lines,
        dry_run=dry_run,
        by_condition=by_condition,
        example_ids=ids,
    )


def example_hash(example: dict) -> str:
    """The content hash that makes a re-imported line a duplicate (see the module)."""
    return sha256_hex(
        [
            example["condition"],
            _as_stored(example["projection"]),
            example["label"],
            example["probability"],
            example["question_set"],
            example["model"],
        ]
    )


def _as_stored(value: object) -> object:
    """`value` as PostgreSQL's jsonb gives it back: a float with no fraction (1e2) returns as
    the integer 100, so the hash of a line and of its stored example must not tell them apart."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _as_stored(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_stored(item) for item in value]
    return value


def _stored_hashes(conditions: set[str]) -> set[str]:
    # Every source: a verdict exported and imported back is the same example, not a new one.
    rows = LabelledExample.objects.filter(condition__in=conditions).values_list(
        "condition", "projection", "label", "probability", "question_set_version", "model_version"
    )
    return {
        example_hash(
            {
                "condition": condition,
                "projection": projection,
                "label": label,
                "probability": probability,
                "question_set": question_set,
                "model": model,
            }
        )
        for condition, projection, label, probability, question_set, model in rows.iterator(
            chunk_size=_BATCH
        )
    }


def _versions(data: dict) -> tuple[dict, list[str]]:
    """The trace's question set and model as the example's versions, or what is wrong."""
    out, problems = {}, []
    for key, limit in (("question_set", MAX_QUESTION_SET_CHARS), ("model", MAX_MODEL_CHARS)):
        value = data.get(key)
        if value is None:
            out[key] = ""
        elif not isinstance(value, str):
            problems.append(f"{key}: must be text")
        elif len(value) > limit:
            problems.append(f"{key}: longer than {limit} characters")
        else:
            out[key] = value
    return out, problems


def _text(line: str | bytes) -> str:
    # parse_traces has already decoded every valid line once: this cannot fail here.
    return line.decode("utf-8") if isinstance(line, bytes) else line
