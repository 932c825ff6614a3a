"""Retention (beat, runs.tasks.apply_retention): finished runs past GUARDIAN_RETAIN_RUNS_DAYS
archived (runs/archives.py) and purged, labelled examples past GUARDIAN_RETAIN_EXAMPLES_DAYS
and notification deliveries past GUARDIAN_RETAIN_NOTIFICATIONS_DAYS deleted. 0 keeps a kind
forever (the default).

What it never does:

- **Purge a run it has not archived.** The archive is written atomically, read back and
  checked (signature and chain) before the run goes, and the run goes only through the one
  purge door (runs/audit.py run_purge, recorded in the purge log). A run whose chain does not
  verify is left in place for a person to look at.
- **Break a chain.** A run's log is its own: purging a whole run leaves every other run's
  chain as it was. A reviewer's labelled example, though, is sealed into its run's story
  (runs/chain.py story_digest): deleting it alone would break its run's seal. So such an
  example leaves with its run, under the runs' retention; the examples' retention deletes the
  examples no run's seal covers (imported, the judge's, audit samples' labels).
- **Take an example a guardian model version learnt from.** A GuardianModelVersion records
  the examples it was fitted on (`example_ids`) and those it was scored on
  (`figures[condition]["held_out_ids"]`); while the version exists none of them is deleted,
  and a run holding one is not purged (its purge would take the example).
- **Drop a notice still owed.** A notification delivery goes only once its escalation is no
  longer open (deleting it sooner could send the notice again).

Each pass is bounded (RUNS_PER_PASS) and idempotent: a pass cut short (a worker killed) is
finished by the next, and an archive written twice is the same run's.
"""

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from escalations.models import (
    EscalationKind,
    EscalationStatus,
    LabelledExample,
    NotificationDelivery,
)
from guardian_core.models import GuardianModelVersion
from runs import archives
from runs.audit import run_chain_verify, run_purge
from runs.chain import FINISHED_STATUSES
from runs.log_triggers import default_purge_actor, log_purge
from runs.models import Run

logger = logging.getLogger(__name__)

# Runs archived and purged per pass at most: a first pass over a large log does not hold a
# worker for hours (the next pass goes on where this one stopped).
RUNS_PER_PASS = 200
DELETE_BATCH = 500


@dataclass
class RetentionReport:
    """What one pass did."""

    archived: list[tuple[int, str]] = field(default_factory=list)  # (run id, archive path)
    held_for_models: list[int] = field(default_factory=list)
    held_broken: list[int] = field(default_factory=list)
    examples_deleted: int = 0
    examples_kept_for_models: int = 0
    notifications_deleted: int = 0

    def as_dict(self) -> dict:
        return {
            "runs_archived": [run_id for run_id, _path in self.archived],
            "runs_held_for_models": self.held_for_models,
            "runs_held_broken_chain": self.held_broken,
            "examples_deleted": self.examples_deleted,
            "examples_kept_for_models": self.examples_kept_for_models,
            "notifications_deleted": self.notifications_deleted,
        }


def _cutoff(days: int, now) -> object | None:
    return now - timedelta(days=days) if days > 0 else None


def archive_dir() -> Path:
    return Path(settings.GUARDIAN_ARCHIVE_DIR)


def examples_fed_to_models() -> set[int]:
    """The ids of the labelled examples an existing guardian model version learnt from or was
    scored on (its example_ids and each condition's held_out_ids)."""
    fed: set[int] = set()
    for example_ids, figures in GuardianModelVersion.objects.values_list("example_ids", "figures"):
        fed.update(i for i in example_ids or [] if isinstance(i, int))
        for entry in (figures or {}).values():
            if isinstance(entry, dict):
                fed.update(i for i in entry.get("held_out_ids") or [] if isinstance(i, int))
    return fed


def runs_past_retention(now=None) -> list[int]:
    """Ids of the finished runs past GUARDIAN_RETAIN_RUNS_DAYS (by their finish, or their last
    change when no finish was recorded), oldest first, with no escalation still open."""
    now = now or timezone.now()
    cutoff = _cutoff(settings.GUARDIAN_RETAIN_RUNS_DAYS, now)
    if cutoff is None:
        return []
    return list(
        Run.objects.filter(status__in=FINISHED_STATUSES)
        .annotate(ended=Coalesce("finished_at", "updated_at"))
        .filter(ended__lt=cutoff)
        .exclude(escalations__status=EscalationStatus.OPEN)
        .order_by("ended", "id")
        .values_list("id", flat=True)
        .distinct()
    )


def run_archive_and_purge(run_id: int, *, fed: set[int], reason: str) -> str:
    """Archive one run and purge it; what became of it: "archived", "held_for_models",
    "held_broken" or "gone". The run is locked while it is read, archived and purged, and the
    archive is checked from the file before the purge."""
    with transaction.atomic():
        run = (
            Run.objects.select_for_update(of=("self",))
            .filter(pk=run_id, status__in=FINISHED_STATUSES)
            .select_related("policy_version", "created_by")
            .first()
        )
        if run is None:
            return "gone"
        # Compared here, not in SQL: a model version may name more ids than SQLite takes
        # as parameters of one statement.
        mine = LabelledExample.objects.filter(verdict__escalation__run_id=run_id)
        if fed and not fed.isdisjoint(mine.values_list("pk", flat=True)):
            return "held_for_models"
        verified = run_chain_verify(run)
        if not verified.ok:
            logger.warning("retention: run %s not archived, its chain is broken: %s",
                           run_id, verified.describe())  # fmt: skip
            return "held_broken"
        document = archives.archive_document(run, reason=reason)
        path = archives.archive_write(document, archive_dir(), archives.archive_name(run))
        checked = archives.archive_check_file(path)
        if not checked.ok or checked.head != verified.head:
            # Never purge what the archive cannot prove: the file stays for a person to see.
            raise archives.ArchiveProblem(
                f"run {run_id}: the archive written does not verify: {checked.describe()}"
            )
        run_purge(
            run_id=run_id,
            reason=f"{reason}; archived to {path} (head {verified.head or 'none'})",
            actor=f"retention ({default_purge_actor()})",
        )
    logger.info("retention: run %s archived to %s and purged", run_id, path)
    return f"archived:{path}"


def examples_past_retention(now=None, fed: set[int] | None = None) -> tuple[list[int], int]:
    """The ids of the labelled examples past GUARDIAN_RETAIN_EXAMPLES_DAYS that may go (none
    sealed into a run's story, that is a verdict's on an escalation other than an audit
    sample; none an existing guardian model version learnt from), and how many of those past
    it are kept for a model version."""
    now = now or timezone.now()
    cutoff = _cutoff(settings.GUARDIAN_RETAIN_EXAMPLES_DAYS, now)
    if cutoff is None:
        return [], 0
    sealed = Q(verdict__isnull=False) & ~Q(verdict__escalation__kind=EscalationKind.AUDIT_SAMPLE)
    fed = examples_fed_to_models() if fed is None else fed
    due = LabelledExample.objects.filter(created_at__lt=cutoff).values_list("pk", flat=True)
    # Compared here, not in SQL (see run_archive_and_purge).
    kept = sum(1 for pk in due if pk in fed) if fed else 0
    ids = [pk for pk in due.exclude(sealed) if pk not in fed]
    return ids, kept


def retention_apply(*, now=None) -> RetentionReport:
    """One retention pass over every kind (see the module's docstring)."""
    now = now or timezone.now()
    report = RetentionReport()
    fed = examples_fed_to_models()
    days = settings.GUARDIAN_RETAIN_RUNS_DAYS
    reason = f"retention: finished more than {days} days ago"
    for run_id in runs_past_retention(now)[:RUNS_PER_PASS]:
        outcome = run_archive_and_purge(run_id, fed=fed, reason=reason)
        if outcome.startswith("archived:"):
            report.archived.append((run_id, outcome.removeprefix("archived:")))
        elif outcome == "held_for_models":
            report.held_for_models.append(run_id)
        elif outcome == "held_broken":
            report.held_broken.append(run_id)
    ids, report.examples_kept_for_models = examples_past_retention(now, fed)
    if ids:
        # Examples are log rows: only a purge, recorded in the purge log, may delete them.
        with log_purge(
            reason=f"retention: {len(ids)} labelled examples older than "
            f"{settings.GUARDIAN_RETAIN_EXAMPLES_DAYS} days, no model version's",
            actor=f"retention ({default_purge_actor()})",
        ):
            # In slices: SQLite caps the parameters of one statement.
            for start in range(0, len(ids), DELETE_BATCH):
                deleted, _ = LabelledExample.objects.filter(
                    pk__in=ids[start : start + DELETE_BATCH]
                ).delete()
                report.examples_deleted += deleted
    notice_cutoff = _cutoff(settings.GUARDIAN_RETAIN_NOTIFICATIONS_DAYS, now)
    if notice_cutoff is not None:
        report.notifications_deleted, _ = (
            NotificationDelivery.objects.filter(created_at__lt=notice_cutoff)
            .exclude(escalation__status=EscalationStatus.OPEN)
            .delete()
        )
    if report.archived or report.examples_deleted or report.notifications_deleted:
        logger.info("retention pass: %s", report.as_dict())
    return report
