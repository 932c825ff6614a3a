"""Real material written by others, read into the local guardian's labelled examples.

`training/sources/<area>/` holds one JSON Lines file per public source and a MANIFEST.json
recording each source's repository, commit, paths and licence (see training/sources/README.md):

- `integrity/`: tool outputs as their authors wrote them, benign ones of many kinds and ones that
  carry a planted instruction; bare planted instructions ("payload") are planted here into benign
  outputs of other sources, at a place chosen from a fixed seed;
- `risk/`: real tools (name, description, argument names) labelled by DESIGN.md's risk classes;
- `runs/`: published agent runs with their benchmark's outcome, read here into projections at
  each turn for goal_reached, infeasible and stagnation.

Every example carries `sources`: the public sources its text came from (a planted example has
two: its instruction's and its carrier's). Leave-one-source-out (training/report.py) trains
without every example that touches the source it measures on.
"""

import hashlib
import json
import random
from collections.abc import Iterator, Mapping
from pathlib import Path

from guardian_core.engine.conditions import Condition
from guardian_core.engine.state import SAME_RESULT, USER_SAID

SOURCES_DIR = Path(__file__).resolve().parent / "sources"
AREAS = ("integrity", "risk", "runs")
RISK_LABELS = ("read_only", "reversible_write", "irreversible", "regulated")
MAX_RESULT = 1500  # characters of one result kept in a run's projection
PLANTED_PER_PAYLOAD = 1
INTEGRITY_GOAL = "Work through the task with the tools available"


def _lines(path: Path) -> Iterator[dict]:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                yield json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: {exc}") from exc


def records(area: str, directory: Path = SOURCES_DIR) -> list[dict]:
    """Every record of `area`, in file then line order, each with its `source`."""
    folder = directory / area
    out = []
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        for record in _lines(path):
            record.setdefault("source", path.stem)
            out.append(record)
    return out


def _seed(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("\0".join(parts).encode()).digest()[:8], "big")


# ---- integrity -----------------------------------------------------------------------------


def _integrity_example(text: str, injected: bool, sources: list[str], kind: str) -> dict:
    return {
        "condition": str(Condition.INTEGRITY),
        "projection": {
            "goal": INTEGRITY_GOAL,
            "history": [],
            "last_results": [text],
            "untrusted": ["last_results"],
        },
        "label": injected,
        "source": sources[0],
        "sources": sources,
        "family": kind,
    }


def _plant_in_json(value: object, payload: str, rng: random.Random) -> bool:
    """Append `payload` to one string value of `value`, in place; False if it has none."""
    holders: list[tuple[object, object]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, item in node.items():
                if isinstance(item, str):
                    holders.append((node, key))
                else:
                    walk(item)
        elif isinstance(node, list):
            for i, item in enumerate(node):
                if isinstance(item, str):
                    holders.append((node, i))
                else:
                    walk(item)

    walk(value)
    if not holders:
        return False
    node, key = holders[rng.randrange(len(holders))]
    node[key] = f"{node[key]} {payload}".strip()  # type: ignore[index]
    return True


def plant(carrier: str, payload: str, rng: random.Random) -> str:
    """`carrier` with `payload` planted: in a string value of a JSON document, else as a
    paragraph or a line of its own at a place `rng` chooses."""
    stripped = carrier.strip()
    if stripped[:1] in "{[":
        try:
            value = json.loads(stripped)
        except ValueError:
            value = None
        if value is not None and _plant_in_json(value, payload, rng):
            return json.dumps(value, ensure_ascii=False)
    separator = "\n\n" if "\n\n" in carrier else "\n"
    parts = carrier.split(separator)
    at = rng.randrange(len(parts) + 1)
    return separator.join([*parts[:at], payload, *parts[at:]])


def integrity_examples(directory: Path = SOURCES_DIR) -> list[dict]:
    """Benign outputs and outputs carrying a planted instruction, as their sources wrote them;
    each bare payload planted into a benign output of another source."""
    items = records("integrity", directory)
    benign = [r for r in items if not r["injected"]]
    out = [
        _integrity_example(r["text"], bool(r["injected"]), [r["source"]], r.get("kind", ""))
        for r in items
        if r.get("kind") != "payload"
    ]
    for r in items:
        if r.get("kind") != "payload":
            continue
        rng = random.Random(_seed(r["source"], r["text"]))
        others = [b for b in benign if b["source"] != r["source"]]
        for _ in range(PLANTED_PER_PAYLOAD if others else 0):
            carrier = others[rng.randrange(len(others))]
            text = plant(carrier["text"], r["text"], rng)
            kind = f"planted:{carrier.get('kind', '')}"
            out.append(_integrity_example(text, True, [r["source"], carrier["source"]], kind))
    return out


# ---- risk ----------------------------------------------------------------------------------


def risk_examples(directory: Path = SOURCES_DIR) -> list[dict]:
    """One example per real tool: the call as the guardian sees it, with the tool's label."""
    out = []
    for r in records("risk", directory):
        if r.get("label") not in RISK_LABELS:
            raise ValueError(f"{r['source']}: {r.get('tool')!r} has label {r.get('label')!r}")
        arguments = r.get("arguments") if isinstance(r.get("arguments"), Mapping) else {}
        out.append(
            {
                "condition": str(Condition.RISK),
                "projection": {
                    "goal": "",
                    "history": [],
                    "last_results": [],
                    "pending_proposal": {
                        "tool": str(r["tool"]),
                        "description": str(r.get("description") or ""),
                        "arguments": {str(k): "" for k in arguments},
                        "intent": "",
                    },
                    "untrusted": ["last_results"],
                },
                "label": r["label"],
                "source": r["source"],
                "sources": [r["source"]],
                "family": r.get("hard_kind") or "",
            }
        )
    return out


# ---- runs ----------------------------------------------------------------------------------


def _result(step: Mapping) -> str | None:
    return str(step.get("result", ""))[:MAX_RESULT] if step.get("kind") == "call" else None


def _summary(turn: int, step: Mapping, before: Mapping | None = None) -> str:
    """The history summary the loop writes for a step (guardian_core/engine/loop.py), marking
    a call that went through with the previous step's very output, as the loop does."""
    kind = step.get("kind")
    if kind == "call":
        status = step.get("status", "done")
        same = status == "done" and before is not None and _result(before) == _result(step)
        return f"turn {turn}: {step.get('tool', 'tool')} {status}" + (
            f" {SAME_RESULT}" if same else ""
        )
    if kind == "user":  # as the loop records what the user said: one line, no turn prefix
        return USER_SAID + " ".join(str(step.get("text", "")).split())[:300]
    return f"turn {turn}: no tool call; said: {str(step.get('text', ''))[:200]}"


def run_projection(run: Mapping, upto: int) -> dict:
    """The projection after the first `upto` steps of `run`."""
    steps = list(run["steps"])[:upto]
    last = steps[-1] if steps else {}
    results = [str(last.get("result", ""))[:MAX_RESULT]] if last.get("kind") == "call" else []
    return {
        "goal": str(run.get("goal", ""))[:2000],
        "acceptance_criteria": [str(c) for c in run.get("acceptance_criteria") or []],
        "history": [
            {"turn": n, "summary": _summary(n, s, steps[n - 1] if n else None)}
            for n, s in enumerate(steps)
        ],
        "last_results": results,
        "replans": 0,
        "untrusted": ["last_results"],
    }


def _run_point(condition: Condition, run: Mapping, n: int, upto: int, label: bool) -> dict:
    return {
        "condition": str(condition),
        "projection": run_projection(run, upto),
        "label": label,
        "source": run["source"],
        "sources": [run["source"]],
        "family": f"run={run['source']}#{n}",
        "outcome": run["outcome"],
        "at_end": upto == len(run["steps"]),
    }


def _published_runs(directory: Path) -> list[tuple[int, dict]]:
    return [
        (n, run)
        for n, run in enumerate(records("runs", directory))
        if run.get("outcome") in ("succeeded", "failed") and run.get("steps")
    ]


def run_examples(condition: Condition, directory: Path = SOURCES_DIR) -> list[dict]:
    """Run-level examples from published runs, at a run's end and a few earlier points.
    goal_reached: a run's end is reached iff its benchmark says it succeeded, and no earlier point
    of a run is. infeasible and stagnation: no point of a run that succeeded is either (it went on
    to succeed); a failed run's end is infeasible only where its source says it was impossible."""
    out = []
    for n, run in _published_runs(directory):
        succeeded = run["outcome"] == "succeeded"
        steps = len(run["steps"])
        rng = random.Random(_seed(run["source"], str(n)))
        # Not every point: long runs would outweigh short ones.
        points = sorted({steps, *rng.sample(range(1, steps + 1), min(3, steps))})
        for upto in points:
            at_end = upto == steps
            if condition == Condition.GOAL_REACHED:
                label = succeeded and at_end
            elif condition == Condition.INFEASIBLE:
                if succeeded:
                    label = False
                elif at_end and run.get("failure_kind") == "infeasible":
                    label = True
                else:
                    continue
            elif condition == Condition.STAGNATION:
                if not succeeded:
                    continue
                label = False
            else:
                continue
            out.append(_run_point(condition, run, n, upto, label))
    return out


def every_run_point(condition: Condition, directory: Path = SOURCES_DIR) -> list[dict]:
    """Every point (after each step) of every published run, labelled as run_examples labels
    the points it samples; what training/report.py measures run-level conditions on."""
    out = []
    for n, run in _published_runs(directory):
        succeeded = run["outcome"] == "succeeded"
        for upto in range(1, len(run["steps"]) + 1):
            at_end = upto == len(run["steps"])
            infeasible = not succeeded and at_end and run.get("failure_kind") == "infeasible"
            label = {
                Condition.GOAL_REACHED: succeeded and at_end,
                Condition.INFEASIBLE: infeasible,
            }.get(condition, False)
            out.append(_run_point(condition, run, n, upto, label))
    return out


def real_examples(condition: Condition, directory: Path = SOURCES_DIR) -> list[dict]:
    """Every example of `condition` read from the real sources."""
    if condition == Condition.INTEGRITY:
        return integrity_examples(directory)
    if condition == Condition.RISK:
        return risk_examples(directory)
    return run_examples(condition, directory)


def sources_digest(directory: Path = SOURCES_DIR) -> str:
    """SHA-256 over every source file (path and bytes, in path order)."""
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*")) if directory.is_dir() else []:
        if path.is_file() and path.suffix in (".jsonl", ".json"):
            data = path.read_bytes()
            digest.update(f"{path.relative_to(directory)}\0{len(data)}\0".encode())
            digest.update(data)
    return digest.hexdigest()
