"""The decision pane's form: a reviewer's POST parsed into escalation_resolve's arguments, with
what they typed kept, so a refused form comes back exactly as it was sent."""

import json
from dataclasses import dataclass, field

from escalations.models import EscalationKind, VerdictDecision
from guardian_core.engine.conditions import DRIFT_SCORES
from runs.models import RiskClass

YES_NO = {"yes": True, "no": False}


@dataclass
class DecisionInput:
    """What the form shows: the reviewer's typed values, and the problems with them."""

    decision: str = ""
    reason: str = ""
    approved: set[int] = field(default_factory=set)
    arguments: dict[int, str] = field(default_factory=dict)  # the editor's text per position
    risk: dict[int, str] = field(default_factory=dict)
    answers: dict[str, str] = field(default_factory=dict)  # as typed: "yes", "3", "regulated"
    rerun: bool = False
    problems: list[str] = field(default_factory=list)
    # escalation_resolve's keyword arguments, when there are no problems.
    resolve: dict = field(default_factory=dict)

    def problem_about(self, name: str) -> bool:
        """Whether a problem names the field `name` (its message starts with it)."""
        return any(problem.startswith(name) for problem in self.problems)


def decision_initial(pane) -> DecisionInput:
    """The form before anything is typed: every held call ticked, its arguments as proposed,
    the reviewer's class starting at the guardian's."""
    return DecisionInput(
        approved={c.call.position for c in pane.held_calls},
        arguments={c.call.position: c.arguments_json for c in pane.held_calls},
        risk={c.call.position: c.default_risk for c in pane.held_calls},
    )


def decision_input(post, pane) -> DecisionInput:
    """Parse the pane's POST. Problems name each field; escalation_resolve checks the rest
    (the reason a rejection needs, the tool's schema, who holds the item) and names them too."""
    kind = pane.escalation.kind
    held = {c.call.position: c for c in pane.held_calls}
    form = DecisionInput(
        decision=post.get("decision", ""),
        reason=post.get("reason", ""),
        rerun=post.get("rerun") == "1",
    )
    if form.decision not in VerdictDecision.values:
        form.problems.append("decision: choose approve, reject or answer")
    for raw in post.getlist("approve_call"):
        if raw.isdigit() and int(raw) in held:
            form.approved.add(int(raw))
        else:
            form.problems.append(f"approve_call: {raw!r} is not a held call of this step")
    seen, risk, edited = {}, {}, {}
    for position, held_call in held.items():
        call = held_call.call
        seen[position] = post.get(f"seen_{position}", "")
        form.risk[position] = post.get(f"risk_{position}", held_call.default_risk)
        if form.risk[position] not in RiskClass.values:
            form.problems.append(
                f"risk_labels: call {position} ({call.tool}): one of {', '.join(RiskClass.values)}"
            )
        else:
            risk[position] = form.risk[position]
        text = post.get(f"arguments_{position}")
        form.arguments[position] = held_call.arguments_json if text is None else text
        if text is None or form.decision != VerdictDecision.APPROVE:
            continue
        try:
            value = json.loads(text)
        except ValueError as error:
            form.problems.append(
                f"arguments of call {position} ({call.tool}): not valid JSON: {error.msg} "
                f"(line {error.lineno}, column {error.colno})"
            )
            continue
        if not isinstance(value, dict):
            form.problems.append(
                f"arguments of call {position} ({call.tool}): must be a JSON object"
            )
        elif _canonical(value) != _canonical(call.arguments):
            edited[position] = value
    for question in pane.questions:
        typed = post.get(f"answer_{question.condition}", "").strip()
        form.answers[question.condition] = typed
        if typed and _label(question.kind, typed) is None:
            form.problems.append(f"answer.{question.condition}: {_expected(question.kind)}")
    approving_nothing = form.decision == VerdictDecision.APPROVE and not form.approved
    if kind == EscalationKind.GATED_STEP and approving_nothing:
        form.problems.append("approve_call: tick the calls to approve, or reject the step")
    if form.problems:
        return form
    form.resolve = _resolve_arguments(form, kind, held, seen, risk, edited, pane.questions)
    return form


def _resolve_arguments(form, kind, held, seen, risk, edited, questions) -> dict:
    arguments = {"decision": form.decision, "reason": form.reason}
    if kind == EscalationKind.GATED_STEP:
        arguments["seen_hashes"] = seen
        arguments["risk_labels"] = risk
        if form.decision == VerdictDecision.APPROVE:
            arguments["approved_calls"] = sorted(form.approved)
            # Only calls that are approved run, so only their edits mean anything.
            edits = {p: v for p, v in edited.items() if p in form.approved}
            if edits:
                arguments["edited_arguments"] = edits
    if form.decision == VerdictDecision.ANSWER:
        arguments["answer"] = {
            q.condition: _label(q.kind, form.answers[q.condition])
            for q in questions
            if form.answers.get(q.condition)
        }
    if kind == EscalationKind.AMBIGUOUS_CALL and form.decision == VerdictDecision.REJECT:
        arguments["rerun"] = form.rerun
    return arguments


def _canonical(value: object) -> str:
    # true and 1 are different arguments; Python's == would call them equal.
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _label(kind: str, typed: str) -> object:
    """The typed answer as escalation_resolve's label, or None when it is not one."""
    if kind == "yes_no":
        return YES_NO.get(typed)
    if kind == "risk":
        return typed if typed in RiskClass.values else None
    if typed.isdigit() and int(typed) in DRIFT_SCORES:
        return int(typed)
    return None


def _expected(kind: str) -> str:
    if kind == "yes_no":
        return "yes or no"
    if kind == "risk":
        return f"one of {', '.join(RiskClass.values)}"
    return "a drift score from 0 to 4"
