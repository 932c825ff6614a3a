"""Why a run ended, in words: each `Run.stop_reason` code the app writes, as a person says it."""

from django.utils.translation import gettext, gettext_noop

# Every code a run's stop_reason can hold, and who writes it: the policy's stop (a condition
# or a cap, runs/turns.py), the coder ⇄ reviewer loop (runs/review_rounds.py), a reviewer's
# verdict (escalations/verdicts.py::_move_run), the sweeper (runs/sweeps.py), cancel and a
# run that keeps failing (runs/services.py), and the MCP gateway's session ending
# (mcp_gateway/guarding.py).
# The runs list offers exactly these as its stop-reason filter. The words are English here (the
# MCP gateway tells the client why its session ended in them); a page translates them when it
# shows them (stop_reason_text(..., translated=True)).
STOP_REASONS: dict[str, str] = {
    "goal_reached": gettext_noop("Goal reached"),
    "review_approved": gettext_noop("The reviewer agent approved the solution"),
    "approved_by_reviewer": gettext_noop("A reviewer approved the solution"),
    "infeasible": gettext_noop("Goal judged infeasible"),
    "stagnation": gettext_noop("No progress, even after replanning"),
    "drift": gettext_noop("Drifted from the goal, even after replanning"),
    "exact_repeat": gettext_noop("Repeated the same calls, even after replanning"),
    "turn_cap": gettext_noop("Turn cap reached; no answer"),
    "token_budget": gettext_noop("Token budget spent; no answer"),
    "cost_budget": gettext_noop("Cost budget spent; no answer"),
    "wall_time_budget": gettext_noop("Time budget spent; no answer"),
    "rejected_by_reviewer": gettext_noop("Rejected by a reviewer"),
    "cancelled_by_reviewer": gettext_noop("Cancelled by a reviewer"),
    "stopped_after_review": gettext_noop("Stopped on a reviewer's answers"),
    "unresolved_after_review": gettext_noop("Still uncertain after a reviewer's answers"),
    "ambiguous_call_not_done": gettext_noop("A call that never finished was confirmed not done"),
    "escalation_expired": gettext_noop("Escalation expired unanswered; nothing ran"),
    "advance_failed": gettext_noop("Stopped after repeated errors advancing the run"),
    "cancelled": gettext_noop("Cancelled"),
    "session_ended": gettext_noop("The MCP client's session ended"),
}


def stop_reason_text(code: str, *, translated: bool = False) -> str:
    """The stop reason in words; "" for a run that has not stopped. A code this module does not
    know yet (a newer guard's) is still shown, as words rather than an identifier. English
    unless `translated` (a page showing it: the active language)."""
    if not code:
        return ""
    said = STOP_REASONS.get(code)
    if said is None:
        return code.replace("_", " ").capitalize()
    return gettext(said) if translated else said
