"""Why a run ended, in words: each `Run.stop_reason` code the app writes, as a person says it."""

# Every code a run's stop_reason can hold, and who writes it: the policy's stop (a condition
# or a cap, runs/turns.py), the coder ⇄ reviewer loop (runs/review_rounds.py), a reviewer's
# verdict (escalations/verdicts.py::_move_run), the sweeper (runs/sweeps.py), cancel and a
# run that keeps failing (runs/services.py), and the MCP gateway's session ending
# (mcp_gateway/guarding.py).
# The runs list offers exactly these as its stop-reason filter.
STOP_REASONS: dict[str, str] = {
    "goal_reached": "Goal reached",
    "review_approved": "The reviewer agent approved the solution",
    "approved_by_reviewer": "A reviewer approved the solution",
    "infeasible": "Goal judged infeasible",
    "stagnation": "No progress, even after replanning",
    "drift": "Drifted from the goal, even after replanning",
    "exact_repeat": "Repeated the same calls, even after replanning",
    "turn_cap": "Turn cap reached; no answer",
    "token_budget": "Token budget spent; no answer",
    "cost_budget": "Cost budget spent; no answer",
    "wall_time_budget": "Time budget spent; no answer",
    "rejected_by_reviewer": "Rejected by a reviewer",
    "cancelled_by_reviewer": "Cancelled by a reviewer",
    "stopped_after_review": "Stopped on a reviewer's answers",
    "unresolved_after_review": "Still uncertain after a reviewer's answers",
    "ambiguous_call_not_done": "A call that never finished was confirmed not done",
    "escalation_expired": "Escalation expired unanswered; nothing ran",
    "advance_failed": "Stopped after repeated errors advancing the run",
    "cancelled": "Cancelled",
    "session_ended": "The MCP client's session ended",
}


def stop_reason_text(code: str) -> str:
    """The stop reason in words; "" for a run that has not stopped. A code this module does not
    know yet (a newer guard's) is still shown, as words rather than an identifier."""
    if not code:
        return ""
    return STOP_REASONS.get(code) or code.replace("_", " ").capitalize()
