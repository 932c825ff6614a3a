"""Printing a benchmark's figures and, when BENCH_JSON names a file, adding them to it as
JSON, so that one run of `make bench` can be compared with the last."""

import json
import os
from pathlib import Path


class Report:
    def __init__(self, section: str, *, header: bool = True) -> None:
        self.section = section
        self.figures: dict[str, dict] = {}
        self.skipped: str | None = None  # why the section did not run, when it did not
        self.error: str | None = None  # what went wrong, when it did
        if header:  # not when a section's own process reports under its parent's header
            print(section)

    def add(self, name: str, value: float, unit: str, *, extra: str = "") -> None:
        self.figures[name] = {"value": round(value, 4), "unit": unit, "note": extra}
        print(f"  {name:<44} {value:10.3f} {unit:<6} {extra}".rstrip())

    def record(self, name: str, value: float, unit: str, *, extra: str = "") -> None:
        """A figure for the JSON only (printed elsewhere, e.g. beside another)."""
        self.figures[name] = {"value": round(value, 4), "unit": unit, "note": extra}

    def ratio(self, name: str, value: float) -> None:
        self.add(name, value, "×")

    def note(self, text: str) -> None:
        print(f"  {text}")

    def skip(self, why: str) -> None:
        """The section did not run: say why, here and in the JSON ("skipped": why)."""
        self.skipped = why
        print(f"  skipped: {why}")

    def fail(self, why: str) -> None:
        """The section broke: say so, here and in the JSON ("error": why, with what it had)."""
        self.error = why
        print(f"  FAILED: {why}")

    def finish(self) -> None:
        path = os.environ.get("BENCH_JSON")
        if not path:
            return
        target = Path(path)
        data = json.loads(target.read_text()) if target.exists() else {}
        if self.skipped:
            data[self.section] = {"skipped": self.skipped}
        elif self.error:
            data[self.section] = {"error": self.error, **self.figures}
        else:
            data[self.section] = self.figures
        target.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
