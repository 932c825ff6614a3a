"""A plain iterative task driven from outside with the local guardian: "check records r-0 …
r-59, one per step", each step a read that returns that record (and now and then a note). It runs
to its end: every step continues with no replan, no stagnation, drift or infeasible answer, it is
not judged done early, and it stops with success once the last record is checked. The same read
answering the same thing again and again is stagnating."""

import pytest
from guardian_client import Call, Guardian, Result, Tool

from runs.models import Decision, Run, RunStatus
from tests.client_helpers import guardian_for

pytestmark = pytest.mark.django_db(transaction=True)

RECORDS = 60
READ_RECORD = Tool(
    name="read_record",
    description="Read one record by its id.",
    parameters={
        "type": "object",
        "properties": {"record_id": {"type": "string"}},
        "required": ["record_id"],
        "additionalProperties": False,
    },
    risk_class="read_only",
)
OWNERS = ["billing", "logistics", "support", "identity", "warehouse", "finance", "legal"]


def record(n: int) -> str:
    """Record r-n as the caller's store returns it: new content every time."""
    return (
        f'{{"id": "r-{n}", "owner": "{OWNERS[n % len(OWNERS)]}", "amount": {17 * n % 503}.{n:02d},'
        f' "updated": "2026-11-{1 + n % 28:02d}", "status": "{"ok" if n % 9 else "needs review"}"}}'
    )


@pytest.fixture
def token(integrator):
    return guardian_for(integrator)


def start(guardian: Guardian):
    return guardian.run(
        goal=f"Check records r-0 … r-{RECORDS - 1}, one per step.",
        acceptance_criteria=[f"Every record from r-0 to r-{RECORDS - 1} has been checked"],
        tools=[READ_RECORD],
        guardian="local",
        budgets={"max_turns": 100},
    )


def guardian_fired(run_id: int) -> list[tuple[int, str]]:
    return [
        (d.turn.index, source)
        for d in Decision.objects.filter(turn__run_id=run_id).select_related("turn")
        for source in d.fired
    ]


def test_checking_sixty_records_one_per_step_runs_to_its_end(live_server, token):
    outcomes = []
    with Guardian(live_server.url, token) as guardian:
        run = start(guardian)
        for n in range(RECORDS):
            calls = [Call("read_record", {"record_id": f"r-{n}"}, call_id=f"read-{n}")]
            gate = run.before(calls=calls)
            assert [c.status for c in gate.calls] == ["run"], (n, gate)
            decision = run.after([Result(0, record(n))])
            outcomes.append(decision.outcome)
            if decision.stopped:
                break

    assert outcomes[:-1] == ["continue"] * (RECORDS - 1)  # never replanned nor stopped early
    assert outcomes[-1] == "stop_success"
    assert len(outcomes) == RECORDS  # not judged done after 6, nor after 59 records
    assert Run.objects.get(pk=run.id).status == RunStatus.SUCCEEDED
    assert guardian_fired(run.id) == [(RECORDS - 1, "goal_reached")]


def test_the_same_read_answering_the_same_thing_is_stagnating(live_server, token):
    """After three new records the caller reads r-3 four times, spelt each time a little
    otherwise (so the plain-code exact-repeat guard does not see it), and gets the same record:
    no new information, so the guardian's stagnation replans the run."""
    spellings = ["r-0", "r-1", "r-2", "r-3", "r-03", "R-3", "r-003"]
    outcomes, answers = [], []
    with Guardian(live_server.url, token) as guardian:
        run = start(guardian)
        for n, record_id in enumerate(spellings):
            run.before(calls=[Call("read_record", {"record_id": record_id}, call_id=f"c-{n}")])
            decision = run.after([Result(0, record(min(n, 3)))])
            outcomes.append(decision.outcome)
            answers.append(Decision.objects.get(turn__run_id=run.id, turn__index=n).answers)
            if decision.stopped:
                break

    fired = guardian_fired(run.id)
    assert outcomes[:4] == ["continue"] * 4
    assert "replan" in outcomes[4:]
    assert {source for _, source in fired} == {"stagnation"}
    assert all(a["stagnation"] < 0.2 for a in answers[:4])
    assert answers[-1]["stagnation"] > 0.8
