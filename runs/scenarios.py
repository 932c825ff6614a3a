"""The demo scenarios in runs/scenarios/*.json: scripted runs that each end where they should.

A file is a scripted-adapter scenario (see guardian_core/adapters/scripted.py) plus two keys of
its own: "expect" (how the run should end, checked by tests and printed by run_scenario) and,
for the coder/reviewer loop, "review_loop" (the coder's and reviewer's scripted replies).
"""

import json
from pathlib import Path

from guardian_core.adapters.scripted import check_scenario
from runs.models import Run
from runs.services import run_start

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"


def scenario_names() -> list[str]:
    return sorted(path.stem for path in SCENARIO_DIR.glob("*.json"))


def scenario_load(name: str) -> dict:
    """The scenario file `name` as a dict; raises ValueError naming every problem."""
    path = SCENARIO_DIR / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"no scenario {name!r}; known: {', '.join(scenario_names())}")
    data = json.loads(path.read_text())
    scripted = {key: value for key, value in data.items() if key not in ("expect", "review_loop")}
    check_scenario(scripted)
    return data


def scenario_run_start(
    name: str,
    *,
    guardian: str = "scripted",
    created_by=None,
    scripted: dict | None = None,
    config: dict | None = None,
) -> Run:
    """Start a run that follows scenario `name` (its first turn is enqueued); `scripted`, when
    given, is the scripted part to play instead of the file's (checked the same way), and
    `config` is added to the run's config."""
    data = scenario_load(name)
    if scripted is None:
        scripted = {k: v for k, v in data.items() if k not in ("expect", "review_loop")}
    else:
        check_scenario(scripted)
    return run_start(
        goal=data["goal"],
        acceptance_criteria=data.get("acceptance_criteria", []),
        tools=data.get("tools", []),
        actor="coder_reviewer" if "review_loop" in data else "scripted",
        guardian=guardian,
        budgets=data.get("budgets", {}),
        config={
            **(config or {}),
            "scenario": scripted,
            "review_loop": data.get("review_loop"),
            "name": name,
        },
        created_by=created_by,
    )
