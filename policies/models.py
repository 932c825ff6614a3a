"""The admins' room's records: who activated which policy or guardian model version and why,
the monitoring page's days, guardian model jobs, and shadow trials (a candidate deciding the
same turns beside the real decisions, never enforced).

They were guardian_core's and runs' models before this app existed: each keeps its table
(`db_table`), so moving them changed no row (migrations/0001_initial.py).
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from guardian_core.models import GuardianAdapter, GuardianModelVersion, PolicyVersion
from runs.models import Decision, DecisionOutcome, Run


class PolicyActivation(models.Model):
    """Who activated a policy version, when and why, with the regression gate's report and,
    when the gate refused and an admin went ahead, the reason they gave."""

    version = models.ForeignKey(PolicyVersion, on_delete=models.PROTECT, related_name="activations")
    activated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    comment = models.TextField()
    gate_report = models.JSONField(default=dict, blank=True)
    override_reason = models.TextField(blank=True)

    class Meta:
        db_table = "guardian_core_policyactivation"
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.version} activated {self.created_at:%Y-%m-%d %H:%M}"


class GuardianModelActivation(models.Model):
    """Who activated a guardian model version, when and why, with the regression gate's report
    and, when the gate refused and an admin went ahead, the reason they gave; or (`retired`)
    who retired it, its runs going back to the adapter as it ships."""

    version = models.ForeignKey(
        GuardianModelVersion, on_delete=models.PROTECT, related_name="activations"
    )
    activated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    comment = models.TextField(blank=True)
    gate_report = models.JSONField(default=dict, blank=True)
    override_reason = models.TextField(blank=True)
    retired = models.BooleanField(default=False)

    class Meta:
        db_table = "guardian_core_guardianmodelactivation"
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        what = "retired" if self.retired else "activated"
        return f"{self.version} {what} {self.created_at:%Y-%m-%d %H:%M}"


class MonitoringDay(models.Model):
    """One local day of the decision log, folded for the monitoring page (guardian_core/
    monitoring.py): the page reads at most a window of these rows, not every decision.

    `counts` maps a condition to its turns' probabilities in monitoring.BINS equal bins;
    `fine` maps a condition to {round(p · monitoring.LIVE_SCALE): turns}, which the suggested
    thresholds price exactly. Written only by monitoring.monitoring_catch_up.

    `runs` counts the runs that ended on the day (by `Run.finished_at`) and `correlated` maps a
    condition to {per-run table "wf,wm,rf,rm": runs} (engine/correlated_errors.py: the run's
    turns, actor wrong or right × guardian flagged or missed), folded once the run has ended
    and can get no more verdicts. Written only by monitoring.correlated_catch_up."""

    day = models.DateField(unique=True)
    # The day's first decision: rates per hour count from it, not from midnight, so a young
    # deployment (or a quiet morning) is not averaged over hours with no traffic at all.
    first_at = models.DateTimeField(null=True, blank=True)
    decisions = models.PositiveIntegerField(default=0)
    escalations = models.PositiveIntegerField(default=0)
    counts = models.JSONField(default=dict)
    fine = models.JSONField(default=dict)
    runs = models.PositiveIntegerField(default=0)
    correlated = models.JSONField(default=dict)

    class Meta:
        db_table = "guardian_core_monitoringday"
        ordering = ["day"]

    def __str__(self) -> str:
        return f"monitoring {self.day}: {self.decisions} decisions"


class MonitoringCursor(models.Model):
    """The last decision folded into MonitoringDay (one row, pk 1): a pass locks it, folds the
    decisions after it in id order and moves it, in one transaction. Runs are folded once they
    have ended, in (finished_at, id) order: the last one folded is kept beside."""

    last_decision_id = models.BigIntegerField(default=0)
    folded_at = models.DateTimeField(null=True, blank=True)
    last_run_finished_at = models.DateTimeField(null=True, blank=True)
    last_run_id = models.BigIntegerField(default=0)

    class Meta:
        db_table = "guardian_core_monitoringcursor"

    def __str__(self) -> str:
        return f"monitoring folded up to decision {self.last_decision_id}"


class GuardianModelJobKind(models.TextChoices):
    RECALIBRATE = "recalibrate", _("Recalibrate (a map over an adapter's answers)")
    RETRAIN = "retrain", _("Retrain the local guardian")
    # The stacked path: retrained on people's labels, then a map over the retrained version's
    # answers at the live prior (a retrained model is no better calibrated than its corpus).
    RETRAIN_RECALIBRATE = (
        "retrain_recalibrate",
        _("Retrain the local guardian, then recalibrate it"),
    )


class GuardianModelJobStatus(models.TextChoices):
    QUEUED = "queued", _("Queued")
    RUNNING = "running", _("Running")
    DONE = "done", _("Done")
    FAILED = "failed", _("Failed")


class GuardianModelJob(models.Model):
    """An admin's request, from the guardian models page, for a new guardian model version
    learnt from the labelled examples: run by a worker (it asks the guardian about every
    example, which takes longer than a page may), with what came of it."""

    Kind = GuardianModelJobKind
    Status = GuardianModelJobStatus

    kind = models.CharField(max_length=20, choices=Kind)
    adapter = models.CharField(max_length=20, choices=GuardianAdapter)
    conditions = models.JSONField(default=list, blank=True)  # [] = every one it can
    # A recalibration stacked on this version instead of the adapter as it ships.
    over = models.ForeignKey(
        GuardianModelVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    status = models.CharField(max_length=20, choices=Status, default=Status.QUEUED)
    version = models.ForeignKey(
        GuardianModelVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # The worker's last sign of life while it runs the job (learning.guardian_model_job_run
    # writes it every GUARDIAN_MODEL_JOB_HEARTBEAT_SECONDS): the sweeper tells a worker that
    # died from one still fitting by it.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "guardian_core_guardianmodeljob"
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=GuardianModelJobStatus.values),
                name="guardian_model_job_status_known",
            ),
            models.CheckConstraint(
                condition=~Q(kind=GuardianModelJobKind.RETRAIN) | Q(adapter=GuardianAdapter.LOCAL),
                name="guardian_model_job_retrains_the_local_guardian_only",
            ),
            models.CheckConstraint(
                condition=~Q(kind=GuardianModelJobKind.RETRAIN_RECALIBRATE)
                | Q(adapter=GuardianAdapter.LOCAL),
                name="guardian_model_job_retrain_recalibrate_local_only",
            ),
        ]

    def __str__(self) -> str:
        return f"guardian model job {self.pk} ({self.kind}, {self.adapter}): {self.status}"


class ShadowTrial(models.Model):
    """A candidate decides every new turn beside the real decision, and is never enforced.

    The candidate is a policy version that is not active (its thresholds and limits over the
    turn's logged answers) or a guardian model version that is not active (asked again with
    the turn's logged projection, then the run's pinned policy). Decisions with an id above
    `after_decision_id` are in the trial; `cursor` is the last one considered (policies/shadow.py).
    """

    policy_version = models.ForeignKey(
        "guardian_core.PolicyVersion",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="shadow_trials",
    )
    guardian_model_version = models.ForeignKey(
        "guardian_core.GuardianModelVersion",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="shadow_trials",
    )
    comment = models.TextField()
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    started_at = models.DateTimeField(auto_now_add=True)
    stopped_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    stopped_at = models.DateTimeField(null=True, blank=True)
    # Why it stopped when nobody pressed Stop (its candidate was activated).
    stop_note = models.TextField(blank=True)
    after_decision_id = models.BigIntegerField()
    cursor = models.BigIntegerField()
    caught_up_at = models.DateTimeField(null=True, blank=True)
    # Decisions the candidate could not decide: coder ⇄ reviewer rounds, runs on another
    # guardian adapter than a candidate model's.
    skipped = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "runs_shadowtrial"
        ordering = ["-started_at", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(policy_version__isnull=True) ^ Q(guardian_model_version__isnull=True),
                name="shadow_trial_one_candidate",
            ),
            # One running trial per candidate: two would decide every turn twice.
            models.UniqueConstraint(
                fields=["policy_version"],
                condition=Q(stopped_at__isnull=True, policy_version__isnull=False),
                name="shadow_trial_one_running_per_policy_version",
            ),
            models.UniqueConstraint(
                fields=["guardian_model_version"],
                condition=Q(stopped_at__isnull=True, guardian_model_version__isnull=False),
                name="shadow_trial_one_running_per_guardian_model_version",
            ),
        ]

    def __str__(self) -> str:
        return f"shadow trial {self.pk} of {self.candidate}"

    @property
    def candidate(self):
        return self.policy_version or self.guardian_model_version

    @property
    def candidate_words(self) -> str:
        if self.policy_version_id:
            return f"policy version {self.policy_version}"
        return f"guardian model version {self.guardian_model_version.number} ({self.candidate})"

    @property
    def running(self) -> bool:
        return self.stopped_at is None


class ShadowDecision(models.Model):
    """What the trial's candidate decided on one turn, beside the real decision. Nothing reads
    it to act: the run went on by its real decision."""

    trial = models.ForeignKey(ShadowTrial, on_delete=models.CASCADE, related_name="decisions")
    decision = models.ForeignKey(Decision, on_delete=models.CASCADE, related_name="+")
    # Copied from the decision so the trial's page lists and counts without joining the log.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    turn_index = models.PositiveIntegerField()
    real_outcome = models.CharField(max_length=20, choices=DecisionOutcome)
    real_stop_reason = models.CharField(max_length=60, blank=True)
    outcome = models.CharField(max_length=20, choices=DecisionOutcome)
    stop_reason = models.CharField(max_length=60, blank=True)
    fired = models.JSONField(default=list, blank=True)
    reasons = models.JSONField(default=list, blank=True)
    # A candidate model's own answers ({} for a policy version: it reads the logged ones).
    answers = models.JSONField(default=dict, blank=True)
    differs = models.BooleanField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "runs_shadowdecision"
        ordering = ["pk"]
        constraints = [
            models.UniqueConstraint(fields=["trial", "decision"], name="shadow_decision_once"),
        ]
        indexes = [
            models.Index(fields=["trial", "differs", "id"], name="shadow_decision_differs"),
        ]

    def __str__(self) -> str:
        return f"{self.trial}: turn {self.turn_index} of run {self.run_id}: {self.outcome}"

    @property
    def deciding_reasons(self) -> list[dict]:
        """The reasons that gave the candidate's outcome (the others did not decide it)."""
        return [r for r in self.reasons if r.get("outcome") == self.outcome]
