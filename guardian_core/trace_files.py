"""Reading a trace file (DESIGN.md's JSON Lines of labelled traces) for the evaluation harness
(policies/harness.py) and the labelled examples' import (escalations/examples.py)."""

from collections.abc import Iterable
from pathlib import Path


class EvaluationError(Exception):
    """Bad input to the harness (unknown version or model, unreadable file); the message
    names what is wrong."""


def trace_file_lines(path: str | Path) -> Iterable[bytes]:
    """The lines of a trace file as bytes (the engine decodes each, so one bad line is one
    malformed line); EvaluationError when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read().splitlines()
    except OSError as exc:
        raise EvaluationError(f"--traces: cannot read {path}: {exc.strerror}") from exc
