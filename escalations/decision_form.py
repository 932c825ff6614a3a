"""The decision pane's form: a reviewer's POST parsed into escalation_resolve's arguments, with
what they typed kept, so a refused form comes back exactly as it was sent."""

import json
import re
from dataclasses import dataclass, field

from django.utils.translation import gettext as _

from escalations.models import ENDED_BY_REJECTION, EscalationKind, VerdictDecision
from escalations.verdicts import verdict_reason_problem
from guardian_core import json_input
from guardian_core.engine.conditions import DRIFT_SCORES
from runs.models import RiskClass

YES_NO = {"yes": True, "no": False}
# Deeper than any tool's arguments (the engine takes 32 levels); a bound before json recurses.
MAX_ARGUMENTS_DEPTH = 64


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
    end_as: str = ""  # how a rejection ends the run: "failed" or "cancelled"
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
        end_as=post.get("end_as", ""),
    )
    if form.decision not in VerdictDecision.values:
        form.problems.append("decision: " + _("choose approve, reject or answer"))
    if too_long := verdict_reason_problem(form.reason):
        form.problems.append(too_long)
    elif reason_problem := json_input.text_problem(form.reason):
        form.problems.append(f"reason: {reason_problem}")
    if form.end_as not in ("", "failed", "cancelled"):
        form.problems.append("end_as: " + _("the run ends failed or cancelled"))
    # Matched as text: int() of 4 300 digits raises, and "²".isdigit() is true.
    held_by_text = {str(position): position for position in held}
    for raw in post.getlist("approve_call"):
        if raw in held_by_text:
            form.approved.add(held_by_text[raw])
        else:
            shown = json_input.shown(raw if len(raw) <= 20 else f"{raw[:20]}…")
            form.problems.append(
                "approve_call: " + _("%(given)r is not a held call of this step") % {"given": shown}
            )
    seen, risk, edited = {}, {}, {}
    for position, held_call in held.items():
        call = held_call.call
        seen[position] = post.get(f"seen_{position}", "")
        form.risk[position] = post.get(f"risk_{position}", held_call.default_risk)
        if form.risk[position] not in RiskClass.values:
            form.problems.append(
                f"risk_labels: call {position} ({call.tool}): "
                + _("one of %(classes)s") % {"classes": ", ".join(RiskClass.values)}
            )
        else:
            risk[position] = form.risk[position]
        text = post.get(f"arguments_{position}")
        form.arguments[position] = held_call.arguments_json if text is None else text
        if text is None or form.decision != VerdictDecision.APPROVE:
            continue
        where = f"arguments of call {position} ({call.tool})"
        try:
            value = json_input.loads(text, max_depth=MAX_ARGUMENTS_DEPTH)
        except json_input.JsonInputError as error:
            form.problems.append(f"{where}: {error}")
            continue
        unstorable = json_input.problems(value)
        if unstorable:
            form.problems += [f"{where}: {problem}" for problem in unstorable]
        elif not isinstance(value, dict):
            form.problems.append(f"{where}: " + _("must be a JSON object"))
        elif _canonical(value) != _canonical(call.arguments):
            edited[position] = value
    for question in pane.questions:
        typed = post.get(f"answer_{question.condition}", "").strip()
        form.answers[question.condition] = typed
        if typed and _label(question.kind, typed) is None:
            form.problems.append(f"answer.{question.condition}: {_expected(question.kind)}")
        elif not typed and form.decision == VerdictDecision.ANSWER:
            # escalation_resolve would refuse it too, naming only the condition: said here,
            # each question gets its own problem and its own field marked.
            form.problems.append(
                f"answer.{question.condition}: "
                + _("choose %(expected)s") % {"expected": _expected(question.kind)}
            )
    approving_nothing = form.decision == VerdictDecision.APPROVE and not form.approved
    if kind == EscalationKind.GATED_STEP and approving_nothing:
        form.problems.append("approve_call: " + _("tick the calls to approve, or reject the step"))
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
    if form.decision == VerdictDecision.REJECT and form.end_as and kind in ENDED_BY_REJECTION:
        arguments["end_as"] = form.end_as
    return arguments


@dataclass(frozen=True)
class FormProblem:
    """One problem as the pane lists it: readable text, and the id of the field it names."""

    text: str
    field: str = ""  # the form field's id ("" for the item as a whole: a claim, the decision)


_CALL = re.compile(r"^(?:arguments of |risk_labels: |seen_hashes: )?call (\d+)\b")
_ANSWER = re.compile(r"^answer\.(\w+): ")


def problems_in_form_order(problems: list[str], pane) -> list[FormProblem]:
    """The problems in the order a reviewer meets their fields: the item as a whole first
    (its claim, the decision), then call by call, question by question, the rerun box and the
    reason; a question's problem says the question, not only its condition."""
    positions = [c.call.position for c in pane.held_calls]
    questions = {q.condition: (index, q) for index, q in enumerate(pane.questions)}
    ranked = []
    for text in problems:
        rank, field_id = (0, 0), ""
        call, answer = _CALL.match(text), _ANSWER.match(text)
        if call and int(call.group(1)) in positions:
            position = int(call.group(1))
            rank = (1, positions.index(position))
            if text.startswith("arguments of "):
                field_id = f"arguments_{position}"
            elif text.startswith("risk_labels: "):
                field_id = f"risk_{position}"
        elif text.startswith(("approve_call:", "approved_calls:", "edited_arguments:")):
            rank = (1, -1)  # about the ticks: before the calls' own problems
            field_id = f"approve_{positions[0]}" if positions else ""
        elif answer and answer.group(1) in questions:
            index, question = questions[answer.group(1)]
            rank, field_id = (2, index), _answer_field(question)
            text = f"\u201c{question.text}\u201d ({question.condition}): {text[answer.end() :]}"
        elif text.startswith("answer"):
            rank = (2, len(questions))
        elif text.startswith("rerun:"):
            rank, field_id = (3, 0), "rerun"
        elif text.startswith("end_as:"):
            rank, field_id = (3, 1), "end_as_failed"
        elif text.startswith("reason:"):
            rank, field_id = (4, 0), "reason"
        ranked.append((rank, FormProblem(text=text, field=field_id)))
    # sorted() is stable: problems about one field keep the order they were found in.
    return [problem for _rank, problem in sorted(ranked, key=lambda pair: pair[0])]


def _answer_field(question) -> str:
    """The id of a question's first field: its class list, or its first choice (the
    template names each choice answer_<condition>_<value>)."""
    if question.kind == "risk":
        return f"answer_{question.condition}"
    first = "yes" if question.kind == "yes_no" else DRIFT_SCORES[0]
    return f"answer_{question.condition}_{first}"


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
        return _("yes or no")
    if kind == "risk":
        return _("one of %(classes)s") % {"classes": ", ".join(RiskClass.values)}
    return _("a drift score from 0 to 4")
