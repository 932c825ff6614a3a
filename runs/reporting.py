"""Plain-text lines that describe turns and runs, for the commands that print them."""

from runs.models import Run, Turn


def turn_line(turn: Turn) -> str:
    decision = turn.decision
    calls = ", ".join(f"{call.tool}[{call.status}]" for call in turn.tool_calls.all()) or "no call"
    why = "; ".join(f"{r['source']} {r['band']}" for r in decision.reasons if r["band"] != "clear")
    return f"  turn {turn.index}: {calls} -> {decision.outcome}" + (f" ({why})" if why else "")


def run_line(run: Run) -> str:
    ending = run.stop_reason or ""
    escalation = run.escalations.raised().filter(status="open").first()
    if escalation is not None:
        ending = f"waiting on escalation {escalation.pk} ({escalation.kind}): {escalation.summary}"
    answer = f" — answer: {run.final_answer}" if run.final_answer else ""
    return f"run {run.pk} {run.status}: {ending}{answer}"


def expectation_problems(run: Run, expect: dict) -> list[str]:
    """Where a finished scenario run differs from its file's "expect" block."""
    problems = []
    if "status" in expect and run.status != expect["status"]:
        problems.append(f"status {run.status}, expected {expect['status']}")
    if "stop_reason" in expect and run.stop_reason != expect["stop_reason"]:
        problems.append(f"stop_reason {run.stop_reason!r}, expected {expect['stop_reason']!r}")
    if "final_answer" in expect and run.final_answer != expect["final_answer"]:
        problems.append(f"final_answer {run.final_answer!r}, expected {expect['final_answer']!r}")
    if "escalation" in expect:
        kinds = list(run.escalations.raised().filter(status="open").values_list("kind", flat=True))
        if kinds != [expect["escalation"]]:
            problems.append(f"open escalations {kinds}, expected [{expect['escalation']!r}]")
    if "outcomes" in expect:
        outcomes = list(run.turns.order_by("index").values_list("decision__outcome", flat=True))
        if outcomes != expect["outcomes"]:
            problems.append(f"outcomes {outcomes}, expected {expect['outcomes']}")
    if expect.get("quarantined"):
        results = (run.state or {}).get("last_results", [])
        withheld = bool(results) and all("withheld" in r for r in results)
        if not withheld:
            problems.append("the turn's outputs were not withheld from the actor")
    return problems
