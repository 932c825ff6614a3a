"""A held step's calls as a reviewer decides them, and approvals bound to exact actions."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from escalations.models import Approval, Escalation
from guardian_core.engine.argument_edits import argument_changes, changes_words
from guardian_core.engine.conditions import Condition, RiskClass, most_likely_risk, parse_answer
from guardian_core.engine.tools import action_hash
from runs.mapping import approval_key
from runs.models import Decision
from runs.tools import run_tools


@dataclass(frozen=True)
class HeldCall:
    """One call of a held step as a reviewer decides on it: what it does, how risky its tool
    says and the guardian thinks it is, and the exact action an approval binds to: the
    idempotency key it will run under and the SHA-256 of the call (the page sends it back as
    `seen_hashes`, so a call that changed since the page was opened is not approved blind)."""

    position: int
    tool: str
    description: str
    arguments: object
    schema: dict
    declared_risk: str  # the tool's own class ("" when the tool is no longer registered)
    guardian_risk: str  # the guardian's most likely class ("" when its answer was malformed)
    idempotency_key: str
    action_hash: str
    needs_quorum: bool  # two distinct approvers, per the run's policy version
    approvals: list[Approval]  # approvals so far, oldest first (a quorum's first approver)
    risk_class: str = ""  # the class the gate held it at: the more severe of the two above


def escalation_held_calls(escalation: Escalation) -> list[HeldCall]:
    """The held calls of an escalated step in position order; [] when it holds none. Three
    queries (the calls, their approvals, the run's policy version unless loaded) at any size."""
    positions = escalation.reason.get("held_calls", [])
    if not positions:
        return []
    turn = escalation.turn
    rows = list(turn.tool_calls.filter(position__in=positions).order_by("position"))
    try:
        risk_answers = turn.decision.risk_answers or []
    except Decision.DoesNotExist:
        risk_answers = []
    quorum = escalation.run.policy_version.quorum or {}
    registry = run_tools(escalation.run)
    approvals: dict[int, list[Approval]] = {}
    for approval in escalation.approvals.select_related("reviewer").order_by("created_at", "id"):
        approvals.setdefault(approval.position, []).append(approval)
    held = []
    for row in rows:
        tool = registry.get(row.tool)
        raw = risk_answers[row.position] if row.position < len(risk_answers) else None
        likely = most_likely_risk(parse_answer(Condition.RISK, raw))
        key = approval_key(
            run_id=escalation.run_id,
            held_turn_index=turn.index,
            position=row.position,
            tool=row.tool,
            arguments=row.arguments,
        )
        held.append(
            HeldCall(
                position=row.position,
                tool=row.tool,
                description=tool.description if tool else "",
                arguments=row.arguments,
                schema=dict(tool.schema) if tool else {},
                declared_risk=tool.risk_class.value if tool else "",
                guardian_risk=likely.value if likely else "",
                idempotency_key=key,
                action_hash=action_hash(row.tool, row.arguments, key),
                needs_quorum=call_needs_quorum(quorum, tool=row.tool, risk_class=row.risk_class),
                approvals=approvals.get(row.position, []),
                risk_class=row.risk_class,
            )
        )
    return held


def approval_edits(approvals: Iterable[Approval]) -> list[dict]:
    """The calls a reviewer edited before approving them, one per call in position order:
    {"position", "tool", "reviewer", "changes": [{"field", "before", "after"}], "words":
    "call 0 (issue_refund) approved with edited arguments: amount 49.9 → 39.9"}. Under a
    quorum both approvers bound the same action, so a call is said once. The change list is
    engine.argument_edits.argument_changes, the one function every page and export uses."""
    edits: dict[int, dict] = {}
    for approval in sorted(approvals, key=lambda a: (a.position, a.pk or 0)):
        if approval.original_arguments is None or approval.position in edits:
            continue
        changes = argument_changes(approval.original_arguments, approval.arguments)
        if not changes:
            continue
        reviewer = approval.reviewer.get_username() if approval.reviewer_id else None
        edits[approval.position] = {
            "position": approval.position,
            "tool": approval.tool,
            "reviewer": reviewer,
            "changes": [change.as_dict() for change in changes],
            "words": f"call {approval.position} ({approval.tool}) approved with edited "
            f"arguments: {changes_words(changes)}",
        }
    return [edits[position] for position in sorted(edits)]


def call_needs_quorum(quorum: object, *, tool: str, risk_class: str) -> bool:
    """Whether a policy version's quorum asks two distinct approvers for a held call: every
    regulated call under {"regulated": true}, every call of a tool named in "tools"."""
    if not isinstance(quorum, Mapping):
        return False
    tools = quorum.get("tools")
    named = isinstance(tools, list) and tool in tools
    return named or (quorum.get("regulated") is True and risk_class == RiskClass.REGULATED)
