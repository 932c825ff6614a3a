"""The demo scenarios in runs/scenarios/*.json: scripted actors whose runs the local guardian
judges, each written so that it ends as its story says.

A file is a scripted-adapter scenario (see guardian_core/adapters/scripted.py) with no guardian
script: the actor's steps are scripted, the guardian is the real one (`local` by default), so
a run ends where it does because the guardian judges it so. Two keys are the file's own:
"expect" (how the run should end, checked by tests/test_demo_stories.py on the local guardian
and printed by run_scenario) and, for the coder/reviewer loop, "review_loop" (the coder's and
reviewer's scripted replies). Tests that need fixed guardian answers play scenarios of their
own, with a guardian script, through `scenario=`.
"""

import json
from pathlib import Path

from guardian_core.adapters.scripted import check_scenario
from runs.models import Run
from runs.services import run_start

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
# The file's keys that are not the scripted actor's scenario.
OWN_KEYS = ("expect", "review_loop")


def scenario_names(directory: Path = SCENARIO_DIR) -> list[str]:
    return sorted(path.stem for path in directory.glob("*.json"))


def scenario_load(name: str, directory: Path = SCENARIO_DIR) -> dict:
    """The scenario file `name` as a dict; raises ValueError naming every problem."""
    path = directory / f"{name}.json"
    if not path.is_file():
        known = ", ".join(scenario_names(directory))
        raise ValueError(f"no scenario {name!r}; known: {known}")
    data = json.loads(path.read_text())
    check_scenario(scripted_part(data))
    return data


def scripted_part(data: dict) -> dict:
    """What the scripted adapters play: the file without its own keys."""
    return {key: value for key, value in data.items() if key not in OWN_KEYS}


def scenario_run_start(
    name: str,
    *,
    guardian: str = "local",
    created_by=None,
    scenario: dict | None = None,
    config: dict | None = None,
) -> Run:
    """Start a run that follows scenario `name` (its first turn is enqueued), judged by
    `guardian`. `scenario`, when given, is the whole scenario to play instead of the file's
    (checked the same way; a test's, with a guardian script for the scripted guardian), and
    `config` is added to the run's config."""
    data = scenario_load(name) if scenario is None else scenario
    scripted = scripted_part(data)
    if scenario is not None:
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
