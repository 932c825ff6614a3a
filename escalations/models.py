"""Escalations sent to people, the verdicts they give, and the labelled examples those become."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from guardian_core.engine.conditions import Condition


class EscalationKind(models.TextChoices):
    GATED_STEP = "gated_step", _("Irreversible or regulated step")
    UNCERTAIN = "uncertain", _("Uncertain guardian answer")
    GUARDIAN_FAILURE = "guardian_failure", _("Guardian failure")
    INTEGRITY = "integrity", _("Injected instructions")
    REVIEW_LOOP = "review_loop", _("Coder/reviewer loop")
    AMBIGUOUS_CALL = "ambiguous_call", _("Ambiguous tool call")
    # A turn that went on, drawn at random for a person to label (escalations/audit_samples.py):
    # it holds nothing and its verdict never moves the run.
    AUDIT_SAMPLE = "audit_sample", _("Audit sample")


# The escalations whose rejection ends the run (a held step's goes back to the actor; an
# ambiguous call's records it as not done): the reviewer says how it ends, failed or cancelled.
ENDED_BY_REJECTION = (
    EscalationKind.UNCERTAIN,
    EscalationKind.GUARDIAN_FAILURE,
    EscalationKind.INTEGRITY,
    EscalationKind.REVIEW_LOOP,
)


# A verdict's resulting_outcome on an audit sample: the run is not moved by it.
AUDIT_OUTCOME = "unchanged"


class EscalationStatus(models.TextChoices):
    OPEN = "open", _("Open")
    APPROVED = "approved", _("Approved")
    REJECTED = "rejected", _("Rejected")
    ANSWERED = "answered", _("Answered")
    EXPIRED = "expired", _("Expired")
    CANCELLED = "cancelled", _("Cancelled")


# The queue's urgency: 0 = an irreversible or regulated call is held, 1 = any other item that
# holds its run, 2 = an audit sample (holds nothing; after everything else).
URGENCY_HELD, URGENCY_HOLDING, URGENCY_AUDIT = 0, 1, 2


def queue_fields(reason: dict, tool_names: dict[int, str]) -> dict:
    """The queue's order and filter columns of an escalation, from its machine-readable reason
    and the names of its turn's calls by position."""
    held = reason.get("held_calls", [])
    positions = [*held, *reason.get("ambiguous_calls", [])]
    sources = dict.fromkeys(t.get("source", "") for t in reason.get("triggered", []))
    tools = dict.fromkeys(tool_names[p] for p in positions if p in tool_names)
    return {
        # The gate holds only irreversible or regulated calls: those go first.
        "urgency": URGENCY_HELD if held else URGENCY_HOLDING,
        "conditions": _wrapped(s for s in sources if s)[:200],
        "tools": _wrapped(tools)[:500],
    }


def _wrapped(names) -> str:
    names = list(names)
    return f",{','.join(names)}," if names else ""


class EscalationQuerySet(models.QuerySet):
    def raised(self) -> "EscalationQuerySet":
        """The escalations the policy raised, which held (or hold) their run: all but audit
        samples, which ask about a turn that went on and never hold or move it."""
        return self.exclude(kind=EscalationKind.AUDIT_SAMPLE)


class Escalation(models.Model):
    """A turn held for a person (gated calls to approve, an uncertain answer to settle), or an
    audit sample: a turn that went on, drawn for a person to label, holding nothing."""

    Kind = EscalationKind

    Status = EscalationStatus

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="escalations")
    turn = models.ForeignKey("runs.Turn", on_delete=models.CASCADE, related_name="escalations")
    kind = models.CharField(max_length=20, choices=Kind)
    status = models.CharField(max_length=20, choices=Status, default=Status.OPEN)
    # Machine-readable why: condition, probability, t*, δ, band, or the gated calls.
    reason = models.JSONField(default=dict, blank=True)
    summary = models.CharField(max_length=300)
    # The queue's order and filters, denormalised from `reason` when the escalation opens so
    # the queue reads one index: 0 = an irreversible or regulated call is held, 1 = the rest,
    # 2 = an audit sample.
    urgency = models.PositiveSmallIntegerField(default=1)
    # ",risk,integrity," and ",issue_refund,": the triggered conditions and the tools held
    # (or ambiguous), comma-wrapped so a filter is a `contains` on ",name,".
    conditions = models.CharField(max_length=200, blank=True)
    tools = models.CharField(max_length=500, blank=True)
    deadline = models.DateTimeField()
    # Extended once by its holder (GUARDIAN_DEADLINE_EXTENSION_MINUTES), never twice.
    deadline_extended = models.BooleanField(default=False)
    # Who works on it now: only the holder may decide; the claim lapses at claim_expires_at.
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    claim_expires_at = models.DateTimeField(null=True, blank=True)
    # When the "nears its deadline, unclaimed" notice went out (once per escalation).
    deadline_warned_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    objects = EscalationQuerySet.as_manager()

    class Meta:
        ordering = ["urgency", "deadline", "id"]
        permissions = [("review_escalation", "Can review escalations")]
        constraints = [
            # A parked run waits on one question at a time; the resume logic relies on it. An
            # audit sample parks nothing: it may be open beside the run's one question.
            models.UniqueConstraint(
                fields=["run"],
                condition=Q(status="open") & ~Q(kind="audit_sample"),
                name="one_open_escalation_per_run",
            ),
            # A turn is drawn for audit at most once: a retried draw finds it taken.
            models.UniqueConstraint(
                fields=["turn"],
                condition=Q(kind="audit_sample"),
                name="one_audit_sample_per_turn",
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
        indexes = [
            models.Index(fields=["status", "deadline"], name="escalation_queue"),
            # The reviewers' queue: open items in their default order, read by keyset.
            models.Index(
                fields=["urgency", "deadline", "id"],
                condition=Q(status="open"),
                name="escalation_open_order",
            ),
            # The queue's other sorts (queue.QUEUE_SORTS), read by keyset the same way.
            models.Index(
                fields=["deadline", "id"],
                condition=Q(status="open"),
                name="escalation_open_deadline",
            ),
            models.Index(
                fields=["created_at", "id"],
                condition=Q(status="open"),
                name="escalation_open_oldest",
            ),
            # The queue's kind filter in its default order, and the counts per kind (an
            # index-only scan).
            models.Index(
                fields=["kind", "urgency", "deadline", "id"],
                condition=Q(status="open"),
                name="escalation_open_kind",
            ),
            # The live claims: the latest lapsed one is part of the queue's stamp
            # (queue.escalation_queue_stamp).
            models.Index(
                fields=["claim_expires_at"],
                condition=Q(status="open", claim_expires_at__isnull=False),
                name="escalation_open_claims",
            ),
            # The latest closings of any kind (decided, expired, cancelled), for the same stamp.
            models.Index(
                fields=["resolved_at"],
                condition=Q(resolved_at__isnull=False),
                name="escalation_resolved",
            ),
        ]

    def __str__(self) -> str:
        return f"Escalation {self.pk} ({self.kind}, {self.status})"


class EscalationEventKind(models.TextChoices):
    CLAIMED = "claimed", _("Claimed")
    RELEASED = "released", _("Released")
    SKIPPED = "skipped", _("Skipped")
    EXTENDED = "extended", _("Deadline extended")
    APPROVED_ONE = "approved_one", _("Approved, awaiting a second approver")
    DECIDED = "decided", _("Decided")
    EXPIRED = "expired", _("Expired unanswered")
    NOTIFIED = "notified", _("Reviewers notified")
    # A notice whose sending stopped with no outcome (its worker died, its message was lost),
    # found by the sweeper: sent again while attempts remain, else given up.
    NOTIFY_RETRIED = "notify_retried", _("Notification sent again")
    NOTIFY_FAILED = "notify_failed", _("Notification not delivered")


class EscalationEvent(models.Model):
    """One line of an escalation's history: who claimed, skipped, extended or decided it."""

    Kind = EscalationEventKind

    escalation = models.ForeignKey(Escalation, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=20, choices=Kind)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            # "Next" passes over what the reviewer skipped lately (claims._claimable).
            models.Index(
                fields=["actor", "created_at"],
                condition=Q(kind="skipped"),
                name="escalation_event_skips",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} on escalation {self.escalation_id}"


class Approval(models.Model):
    """One reviewer's approval of one held call, bound to the exact action they saw.

    The worker runs a held call only if the SHA-256 of the call it is about to run (tool,
    arguments, idempotency key) matches an unused, unexpired approval; it marks the approval
    used by that turn, so an approval runs one action once.
    """

    escalation = models.ForeignKey(Escalation, on_delete=models.CASCADE, related_name="approvals")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="approvals"
    )
    position = models.PositiveIntegerField()
    tool = models.CharField(max_length=120)
    # The arguments as approved; when the reviewer edited them, the proposed ones are kept.
    arguments = models.JSONField(default=dict)
    original_arguments = models.JSONField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=64, blank=True)
    action_hash = models.CharField(max_length=64)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    used_on_turn = models.ForeignKey(
        "runs.Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["escalation_id", "position", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["escalation", "reviewer", "position"],
                name="approval_one_per_reviewer_and_call",
            ),
        ]

    def __str__(self) -> str:
        return f"approval of call {self.position} on escalation {self.escalation_id}"

    @property
    def modified(self) -> bool:
        return self.original_arguments is not None


class ReviewGuidance(models.Model):
    """Admins' rubric: a short guidance text per condition or per tool, shown next to the
    decision."""

    condition = models.CharField(
        max_length=20, blank=True, choices=[(c.value, c.value) for c in Condition]
    )
    tool = models.CharField(max_length=120, blank=True)
    text = models.TextField(max_length=2000)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["condition", "tool"]
        verbose_name_plural = _("review guidance")
        constraints = [
            models.CheckConstraint(
                condition=~Q(condition="") | ~Q(tool=""),
                name="guidance_names_condition_or_tool",
                violation_error_message=_("Name a condition, a tool, or both."),
            ),
            models.UniqueConstraint(
                fields=["condition", "tool"],
                name="guidance_unique",
                violation_error_message=_(
                    "There is guidance for this condition and tool already: edit that one."
                ),
            ),
        ]

    def __str__(self) -> str:
        return gettext("guidance for %(name)s") % {"name": self.condition or self.tool}


class NotificationChannel(models.TextChoices):
    EMAIL = "email", _("Email")
    WEBHOOK = "webhook", _("Webhook")


class NotificationEvent(models.TextChoices):
    ARRIVED = "arrived", _("New escalation")
    DEADLINE_NEAR = "deadline_near", _("Deadline near, unclaimed")


class NotificationDelivery(models.Model):
    """One notification to reviewers, and what became of it (each attempt is logged here)."""

    Channel = NotificationChannel
    Event = NotificationEvent

    escalation = models.ForeignKey(
        Escalation, on_delete=models.CASCADE, related_name="notifications"
    )
    event = models.CharField(max_length=20, choices=NotificationEvent)
    channel = models.CharField(max_length=10, choices=NotificationChannel)
    target = models.CharField(max_length=500)
    # pending | sending (claimed by a task) | sent | failed
    status = models.CharField(max_length=10, default="pending")
    attempts = models.PositiveIntegerField(default=0)
    response_status = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["escalation", "event", "channel", "target"], name="notification_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} via {self.channel} for escalation {self.escalation_id}"


# A verdict's reason is read by the actor, on the run page and in the exports: capped as the
# reviewers' guidance is (ReviewGuidance.text), and refused past it, never cut.
VERDICT_REASON_MAX_CHARS = 2000


class VerdictDecision(models.TextChoices):
    APPROVE = "approve", _("Approve")
    REJECT = "reject", _("Reject")
    ANSWER = "answer", _("Answer")


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
    # For a gated step: the reviewer's own risk class per held call, {"0": "irreversible"}:
    # the label of the risk example is a person's judgement, not the system's class.
    risk_labels = models.JSONField(default=dict, blank=True)
    # From the claim (or the item's arrival) to the verdict.
    seconds_to_decide = models.FloatField(null=True, blank=True)
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
    HUMAN = "human", _("Human verdict")
    JUDGE = "judge", _("Second-tier judge")
    IMPORT = "import", _("Imported trace")


class ExampleSelection(models.TextChoices):
    """How an example came to be labelled: what it says about the class prior of its labels
    (docs/DESIGN.md, "Priors are data"). Only an audit sample is drawn from the traffic as it
    is; the others over-sample hard cases or come from elsewhere. The trace format's
    `selection` field (guardian_core/engine/evaluation.py SELECTIONS) carries these values."""

    ESCALATED = "escalated", _("Escalated (a verdict on what the policy raised)")
    AUDIT_SAMPLE = "audit_sample", _("Audit sample (a random turn that went on)")
    IMPORTED = "imported", _("Imported")
    NEAR_MISS = "near_miss", _("Near-miss over-sampling")


# Labels people gave: reviewers' verdicts and imported labelled traces. The gates, the
# agreement and the suggested thresholds measure against these only: measured against the
# judge's labels, a guardian would only show how alike two models are.
PEOPLES_SOURCES = (ExampleSource.HUMAN, ExampleSource.IMPORT)


class LabelledExample(models.Model):
    """One example in the trace format of DESIGN.md: what the guardian saw, and the truth."""

    Source = ExampleSource
    Selection = ExampleSelection

    condition = models.CharField(max_length=20)
    projection = models.JSONField()
    probability = models.FloatField(null=True, blank=True)
    label = models.JSONField()
    source = models.CharField(max_length=10, choices=Source)
    # How it was selected for labelling (the judge's labels keep source `judge`, and say here
    # what the judge labelled). The app's own paths always name it; the default is for rows
    # made by hand (a shell, a test), which are as much outside traffic as an import.
    selection = models.CharField(
        max_length=20, choices=Selection, default=ExampleSelection.IMPORTED
    )
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
            models.CheckConstraint(
                condition=Q(selection__in=ExampleSelection.values),
                name="labelled_example_selection_known",
            ),
        ]
        indexes = [
            # audit_sample_counts (escalations/examples.py): people's audit labels per condition.
            models.Index(fields=["selection", "condition"], name="example_selection"),
        ]

    def __str__(self) -> str:
        return f"{self.condition} example {self.pk} ({self.source})"
