"""Escalations sent to people, the verdicts they give, and the labelled examples those become."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from guardian_core.engine.conditions import Condition


class EscalationKind(models.TextChoices):
    GATED_STEP = "gated_step", "Irreversible or regulated step"
    UNCERTAIN = "uncertain", "Uncertain guardian answer"
    GUARDIAN_FAILURE = "guardian_failure", "Guardian failure"
    INTEGRITY = "integrity", "Injected instructions"
    REVIEW_LOOP = "review_loop", "Coder/reviewer loop"
    AMBIGUOUS_CALL = "ambiguous_call", "Ambiguous tool call"


class EscalationStatus(models.TextChoices):
    OPEN = "open", "Open"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    ANSWERED = "answered", "Answered"
    EXPIRED = "expired", "Expired"
    CANCELLED = "cancelled", "Cancelled"


class Escalation(models.Model):
    """A turn held for a person: gated calls to approve, or an uncertain answer to settle."""

    Kind = EscalationKind

    Status = EscalationStatus

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="escalations")
    turn = models.ForeignKey("runs.Turn", on_delete=models.CASCADE, related_name="escalations")
    kind = models.CharField(max_length=20, choices=Kind)
    status = models.CharField(max_length=20, choices=Status, default=Status.OPEN)
    # Machine-readable why: condition, probability, t*, δ, band, or the gated calls.
    reason = models.JSONField(default=dict, blank=True)
    summary = models.CharField(max_length=300)
    deadline = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["deadline", "id"]
        permissions = [("review_escalation", "Can review escalations")]
        constraints = [
            # A parked run waits on one question at a time; the resume logic relies on it.
            models.UniqueConstraint(
                fields=["run"], condition=Q(status="open"), name="one_open_escalation_per_run"
            ),
            models.CheckConstraint(
                condition=Q(status__in=EscalationStatus.values),
                name="escalation_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(status="open", resolved_at__isnull=True)
                | (~Q(status="open") & Q(resolved_at__isnull=False)),
                name="escalation_resolved_at_matches_status",
            ),
        ]
        indexes = [models.Index(fields=["status", "deadline"], name="escalation_queue")]

    def __str__(self) -> str:
        return f"Escalation {self.pk} ({self.kind}, {self.status})"


class VerdictDecision(models.TextChoices):
    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject"
    ANSWER = "answer", "Answer"


class Verdict(models.Model):
    """A person's resolution of one escalation. Append-only."""

    Decision = VerdictDecision

    escalation = models.OneToOneField(Escalation, on_delete=models.CASCADE, related_name="verdict")
    decision = models.CharField(max_length=10, choices=Decision)
    reason = models.TextField(blank=True)
    # For an uncertain condition: the human answer (a boolean, a risk class, a drift score).
    answer = models.JSONField(null=True, blank=True)
    # Positions of the held step's calls the reviewer approved; exactly these run.
    approved_calls = models.JSONField(default=list, blank=True)
    # An ambiguous call the reviewer says did not go through runs again, with its own
    # idempotency key, only when they ask for it explicitly.
    rerun = models.BooleanField(default=False)
    # What the run did next because of this verdict (continue, stop_success, ...).
    resulting_outcome = models.CharField(max_length=20, blank=True)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="verdicts"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(decision__in=VerdictDecision.values),
                name="verdict_decision_valid",
            ),
            models.CheckConstraint(
                condition=~Q(decision="reject") | ~Q(reason=""),
                name="verdict_reject_has_reason",
            ),
            models.CheckConstraint(
                condition=Q(rerun=False) | Q(decision="reject"),
                name="verdict_rerun_only_on_reject",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.decision} on escalation {self.escalation_id}"


class ExampleSource(models.TextChoices):
    HUMAN = "human", "Human verdict"
    JUDGE = "judge", "Second-tier judge"
    IMPORT = "import", "Imported trace"


class LabelledExample(models.Model):
    """One example in the trace format of DESIGN.md: what the guardian saw, and the truth."""

    Source = ExampleSource

    condition = models.CharField(max_length=20)
    projection = models.JSONField()
    probability = models.FloatField(null=True, blank=True)
    label = models.JSONField()
    source = models.CharField(max_length=10, choices=Source)
    question_set_version = models.CharField(max_length=40)
    model_version = models.CharField(max_length=120)
    policy_version = models.ForeignKey(
        "guardian_core.PolicyVersion",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="labelled_examples",
    )
    verdict = models.ForeignKey(
        Verdict, null=True, blank=True, on_delete=models.PROTECT, related_name="examples"
    )
    labelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(probability__isnull=True)
                | Q(probability__gte=0.0, probability__lte=1.0),
                name="labelled_example_probability_in_unit_interval",
            ),
            models.CheckConstraint(
                condition=Q(condition__in=[c.value for c in Condition]),
                name="labelled_example_condition_known",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.condition} example {self.pk} ({self.source})"
