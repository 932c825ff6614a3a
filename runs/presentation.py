"""How runs read on the auditors' runs list: one row per run, formatted once in Python; and the
name the list's decision log download is saved under."""

from dataclasses import dataclass
from datetime import datetime

from django.urls import reverse
from django.utils import timezone

from runs.models import DecisionOutcome, Run
from runs.stop_reasons import stop_reason_text
from runs.vocabulary import actor_words

_OUTCOMES = dict(DecisionOutcome.choices)


def _truncated(text: str, limit: int) -> str:
    # truncatechars without its lazy-translation machinery, which costs more than the row.
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


@dataclass(frozen=True)
class RunRow:
    """What one row of the runs list shows. The goal is untrusted and stays plain str here:
    the template escapes it and isolates it in <bdi>. Numbers are text already: the template
    engine localizes every int it prints, which costs more than the rest of the row."""

    pk: str
    url: str
    goal: str
    actor: str
    actor_label: str
    status: str
    status_label: str
    stop_reason: str  # the code, for the title attribute and the filter
    stop_text: str  # the same in words ("" while the run goes on)
    outcome: str  # the last decision's outcome ("" before the first decision)
    outcome_label: str
    turns: str
    escalations: str
    policy: str
    created_iso: str
    created_text: str


def run_rows(items: list[Run]) -> list[RunRow]:
    """Rows of runs read by runs.selectors.run_list_filtered (its annotations set)."""
    rows = []
    for run in items:
        created = timezone.localtime(run.created_at)
        outcome = run.last_outcome or ""
        rows.append(
            RunRow(
                pk=str(run.pk),
                url=reverse("runs:detail", args=[run.pk]),
                goal=_truncated(run.goal_head, 100),
                actor=run.actor,
                actor_label=actor_words(run.actor, translated=True),
                status=run.status,
                status_label=run.get_status_display(),
                stop_reason=run.stop_reason,
                stop_text=stop_reason_text(run.stop_reason, translated=True),
                outcome=outcome,
                outcome_label=_OUTCOMES.get(outcome, outcome),
                turns=str(run.turn_count),
                escalations=str(run.escalation_count),
                policy=str(run.policy_number),
                created_iso=created.isoformat(),
                # Seconds: runs started within a minute must still read as newest first.
                created_text=f"{created:%Y-%m-%d %H:%M:%S}",
            )
        )
    return rows


def decision_log_filename(now: datetime | None = None) -> str:
    """The all-runs decision log's file name, the same from the page and the API:
    `decision-log-<YYYYmmdd-HHMMSS>.csv` in the server's time zone, so two downloads (filtered
    or not) do not overwrite each other."""
    moment = timezone.localtime(now or timezone.now())
    return f"decision-log-{moment:%Y%m%d-%H%M%S}.csv"
