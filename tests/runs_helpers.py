"""Helpers for tests that drive runs: start a scenario and advance it in this process.

Most tests need a guardian whose answers they know, so `start` plays the scripted scenarios in
tests/scripted_scenarios/ (a scripted actor and a scripted guardian: the demo's stories as they
were scripted once); tests/test_demo_stories.py plays the demo's own scenarios on the local
guardian."""

from pathlib import Path

from demo.setup import demo_policy_version
from runs.models import Run, RunStatus
from runs.scenarios import scenario_load, scenario_names, scenario_run_start
from runs.services import run_advance

SCRIPTED_DIR = Path(__file__).resolve().parent / "scripted_scenarios"


def scripted_names() -> list[str]:
    return scenario_names(SCRIPTED_DIR)


def scripted_scenario(name: str) -> dict:
    """The test scenario `name`, with its guardian script."""
    return scenario_load(name, SCRIPTED_DIR)


def start(name: str, **kwargs) -> Run:
    """A run of test scenario `name`, on the scripted guardian unless `guardian` says."""
    demo_policy_version()
    kwargs.setdefault("guardian", "scripted")
    kwargs.setdefault("scenario", scripted_scenario(name))
    return scenario_run_start(name, **kwargs)


def drive(run: Run, *, max_steps: int = 30) -> Run:
    """Advance `run` here, turn after turn, until it is no longer running."""
    for _ in range(max_steps):
        run.refresh_from_db()
        if run.status != RunStatus.RUNNING:
            return run
        run_advance(run_id=run.pk)
    raise AssertionError(f"run {run.pk} still running after {max_steps} advances")


def watch_the_actor(monkeypatch) -> list[tuple[dict, tuple]]:
    """Wrap each run's real actor so a test sees every (projection, feedback) it was given."""
    import runs.turns

    seen: list[tuple[dict, tuple]] = []
    build = runs.turns.build_actor

    class Watched:
        def __init__(self, actor) -> None:
            self.actor = actor

        def propose(self, projection, feedback):
            seen.append((projection, tuple(feedback)))
            return self.actor.propose(projection, feedback)

    monkeypatch.setattr(runs.turns, "build_actor", lambda *a, **k: Watched(build(*a, **k)))
    return seen


def reading_scenario(turns: int) -> dict:
    """A scripted run that reads a different order each turn with a calm guardian: it goes on
    for as many turns as asked (no repeat, no stop)."""
    steps = [
        {"calls": [{"tool": "read_order", "arguments": {"order_id": f"ord_{i:05d}"}}], "tokens": 1}
        for i in range(turns + 5)
    ]
    return {
        "name": "reading-orders",
        "goal": "Read every order, one a turn.",
        "tools": ["read_order"],
        "actor": {"turns": steps},
        "guardian": {"model_version": "scripted-reading"},
    }
