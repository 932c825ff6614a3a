"""Runs, their turns, the decision taken on each turn, the tool calls each turn proposed, and
an external run's webhook and its deliveries."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from guardian_core.untrusted import bidi_visible


class RunStatus(models.TextChoices):
    PENDING = "pending", _("Pending")
    RUNNING = "running", _("Running")
    WAITING = "waiting", _("Waiting for a reviewer")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")


class Run(models.Model):
    """One agent loop working toward a goal under the guard of one pinned policy version."""

    Status = RunStatus

    # The run's identity in the decision log's hash chain: unlike the id it survives an
    # export and an import into another database.
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    goal = models.TextField()
    acceptance_criteria = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=20, choices=Status, default=Status.PENDING)
    # Why a finished run ended, in the policy's words (goal_reached, infeasible, turn_cap, ...).
    stop_reason = models.CharField(max_length=60, blank=True)
    # Null unless the run stopped with success: a capped or failed run has no answer at all,
    # which is not the same as an empty answer.
    final_answer = models.TextField(null=True, blank=True)  # noqa: DJ001
    policy_version = models.ForeignKey(
        "guardian_core.PolicyVersion", on_delete=models.PROTECT, related_name="runs"
    )
    actor = models.CharField(max_length=60, help_text="Actor adapter name.")
    guardian = models.CharField(max_length=60, help_text="Guardian adapter name.")
    tools = models.JSONField(default=list, blank=True, help_text="Names of the tools it may use.")
    budgets = models.JSONField(default=dict, blank=True)
    # Adapter settings of this run, e.g. the scenario a scripted actor and guardian follow.
    config = models.JSONField(default=dict, blank=True)
    # The loop's current compact state (guardian_core.engine.state.LoopState.to_dict): what
    # the next turn needs, bounded whatever the run's length; {} before the first turn. Each
    # turn records its steps, from which any earlier version is rebuilt.
    state = models.JSONField(default=dict, blank=True)
    # The run's seal (runs/chain.py): a keyed MAC over its goal, status, answer and the end of
    # its decision log, rewritten by every write that moves one of them. {} before the keyed
    # log; verify_log names a run without one.
    seal = models.JSONField(default=dict, blank=True)
    # A worker holds the run while it advances a turn; an expired lease means the worker died
    # and the sweeper may hand the run to another (a conditional update claims it).
    lease_token = models.CharField(max_length=36, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Consecutive failures to advance (not guardian answers: errors of actor, broker, worker).
    failures = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    # What model calls that failed before any turn recorded them were billed ({"tokens",
    # "cost"}: a truncated or refused actor reply): the next recorded turn adds it to its usage,
    # which the budgets read, and clears it in the same write.
    unbilled = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The caller's Idempotency-Key for starting it, and a digest of what it asked: a retried
    # start (its answer lost) finds this run again instead of making a second one.
    start_key = models.CharField(max_length=128, blank=True, default="")
    start_digest = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [
            ("audit_run", "Can browse the decision log of runs"),
            ("drive_run", "Can drive an external run: propose its steps, report their results"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["created_by", "start_key"],
                condition=~models.Q(start_key=""),
                name="run_start_key_unique_per_user",
            ),
            models.CheckConstraint(
                condition=Q(status__in=RunStatus.values),
                name="run_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(final_answer__isnull=True) | Q(status="succeeded"),
                name="run_answer_only_on_success",
            ),
        ]
        # The sweeper finds running runs by status. No column a turn rewrites (updated_at,
        # lease, state) is indexed, so PostgreSQL updates the run row in place (HOT) on every
        # turn instead of adding index entries that a long run would pile up.
        indexes = [
            models.Index(fields=["status"], name="run_status"),
            # The runs list reads newest first by keyset, (created_at, id) < cursor, from this
            # index (runs.selectors.run_list_filtered); created_at is written once. The goal
            # search's trigram index is PostgreSQL's own: migration 0010 makes it there.
            models.Index(fields=["created_at", "id"], name="run_newest"),
            # The runs list filtered by actor, newest first: external runs may be few among
            # many, and this reads them without walking every run.
            models.Index(fields=["actor", "created_at", "id"], name="run_actor_newest"),
            # The monitoring page folds ended runs in (finished_at, id) order by keyset
            # (policies/monitoring.py correlated_catch_up); finished_at is written once.
            models.Index(
                fields=["finished_at", "id"],
                condition=Q(finished_at__isnull=False),
                name="run_ended_order",
            ),
        ]

    def __str__(self) -> str:
        # The goal is untrusted: its bidirectional controls are written out wherever a run is
        # named (the Django admin's titles and lists, selects).
        return f"Run {self.pk}: {bidi_visible(self.goal[:60])}"


class Turn(models.Model):
    """One round trip of the loop: a proposal, its checks, the tool results and the state."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="turns")
    index = models.PositiveIntegerField()
    state_hash = models.CharField(max_length=64, help_text="SHA-256 of the canonical state.")
    # Written before any tool of the turn runs; a retried turn reuses it instead of asking the
    # actor again, so the idempotency keys of its calls stay the same.
    proposal = models.JSONField(default=dict, blank=True)
    # Exactly what the guardian was shown after the calls ran ({} for a held step, when it
    # was not asked), before any output was withheld from the actor; and, for the risk check,
    # one projection per proposed call. Labelled examples are built from these.
    projection = models.JSONField(default=dict, blank=True, help_text="What the guardian saw.")
    risk_projections = models.JSONField(default=list, blank=True)
    # The state steps this turn made (a verdict's, then the turn's own): the state after it is
    # rebuilt from the run's start and every turn's steps, and `state_hash` checks it.
    steps = models.JSONField(default=list, blank=True)
    # A coder ⇄ reviewer turn's loop state (bounded by its rounds); {} for agent-loop turns.
    state = models.JSONField(default=dict, blank=True)
    usage = models.JSONField(default=dict, blank=True, help_text="Budget spent up to this turn.")
    feedback = models.JSONField(default=list, blank=True, help_text="For the next proposal.")
    # An external run's step gated and waiting for the caller's results: the risk answers it
    # was gated on, the approvals and keys it runs under (runs/external.py prepares the step
    # again from them, without asking the guardian twice). {} for every other turn.
    gate = models.JSONField(default=dict, blank=True)
    timings = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "index"]
        constraints = [
            # A redelivered task must never record a turn twice: this is what refuses it.
            models.UniqueConstraint(fields=["run", "index"], name="turn_index_unique_per_run"),
            models.CheckConstraint(
                condition=Q(finished_at__isnull=True) | Q(finished_at__gte=F("started_at")),
                name="turn_finishes_after_start",
            ),
        ]

    def __str__(self) -> str:
        return f"Run {self.run_id} turn {self.index}"


class DecisionOutcome(models.TextChoices):
    CONTINUE = "continue", _("Continue")
    REPLAN = "replan", _("Replan")
    ESCALATE = "escalate", _("Escalate")
    STOP_SUCCESS = "stop_success", _("Stop with success")
    STOP_FAILURE = "stop_failure", _("Stop with failure")


class Decision(models.Model):
    """The policy's one outcome for a turn, with everything needed to replay it."""

    Outcome = DecisionOutcome

    # One decision per turn, and every decision has its turn.
    turn = models.OneToOneField(Turn, on_delete=models.CASCADE, related_name="decision")
    outcome = models.CharField(max_length=20, choices=Outcome)
    answers = models.JSONField(help_text="The guardian's raw answers, per condition.")
    risk_answers = models.JSONField(default=list, blank=True, help_text="One per proposed call.")
    # What the policy keeps of this turn for hysteresis and exact-repeat detection.
    fired = models.JSONField(default=list, blank=True)
    call_signatures = models.JSONField(default=list, blank=True)
    stop_reason = models.CharField(max_length=60, blank=True)
    thresholds = models.JSONField(help_text="The thresholds in force, per condition.")
    reasons = models.JSONField(default=list, blank=True)
    policy_version = models.ForeignKey(
        "guardian_core.PolicyVersion", on_delete=models.PROTECT, related_name="decisions"
    )
    question_set_version = models.CharField(max_length=40)
    guardian_model_version = models.CharField(max_length=120)
    state_hash = models.CharField(max_length=64)
    # The tamper-evident log (runs/chain.py): HMAC-SHA256, under the log's key, of this
    # decision's content and the story it rests on, which includes the previous decision's
    # hash in the same run ("" for the first); `seal_key` names the key (its id, never the
    # key). A database trigger refuses any UPDATE or DELETE of a decision outside a purge.
    prev_hash = models.CharField(max_length=64, blank=True, default="")
    content_hash = models.CharField(max_length=64, blank=True, default="")
    seal_key = models.CharField(max_length=16, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["turn"]
        constraints = [
            models.CheckConstraint(
                condition=Q(outcome__in=DecisionOutcome.values),
                name="decision_outcome_valid",
            ),
        ]
        # The admins' monitoring reads the last days of decisions: a range on this index, not
        # a scan of every decision ever logged.
        indexes = [models.Index(fields=["created_at"], name="decision_created_at")]

    def __str__(self) -> str:
        return f"{self.turn}: {self.outcome}"


class RiskClass(models.TextChoices):
    READ_ONLY = "read_only", _("Read-only")
    REVERSIBLE_WRITE = "reversible_write", _("Reversible write")
    IRREVERSIBLE = "irreversible", _("Irreversible")
    REGULATED = "regulated", _("Regulated")


class ToolCallStatus(models.TextChoices):
    PROPOSED = "proposed", _("Proposed")
    INVALID = "invalid", _("Invalid arguments")
    HELD = "held", _("Held for a reviewer")
    REJECTED = "rejected", _("Rejected")
    STARTED = "started", _("Started")
    DONE = "done", _("Done")
    FAILED = "failed", _("Failed")
    AMBIGUOUS = "ambiguous", _("Ambiguous (started, never finished)")


class ToolCall(models.Model):
    """One call a turn proposed, from validation to its (untrusted) result."""

    RiskClass = RiskClass

    Status = ToolCallStatus

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="tool_calls")
    position = models.PositiveIntegerField()
    tool = models.CharField(max_length=120)
    arguments = models.JSONField(default=dict, blank=True)
    intent = models.TextField(blank=True)
    risk_class = models.CharField(max_length=20, choices=RiskClass)
    status = models.CharField(max_length=20, choices=Status, default=Status.PROPOSED)
    # Derived from run, turn, position, tool and canonical arguments; handed to the tool so a
    # retried turn never repeats a side effect.
    # None for an invalid call, which never runs.
    idempotency_key = models.CharField(max_length=64, unique=True, null=True, blank=True)
    # Null until the call ran; an empty string is a tool that returned nothing.
    result = models.TextField(  # noqa: DJ001
        null=True, blank=True, help_text="Verbatim, untrusted output."
    )
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["turn", "position"]
        constraints = [
            models.UniqueConstraint(fields=["turn", "position"], name="tool_call_position_unique"),
            models.CheckConstraint(
                condition=Q(risk_class__in=RiskClass.values),
                name="tool_call_risk_class_valid",
            ),
            models.CheckConstraint(
                condition=Q(status__in=ToolCallStatus.values),
                name="tool_call_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool} #{self.position} of {self.turn}"


class DemoSideEffect(models.Model):
    """What the demo's write tools did to "the world" (refunds issued, emails sent).

    Deliberately no unique key: this table is the independent witness that a side effect
    happened exactly once, even after a worker died mid-turn.
    """

    tool = models.CharField(max_length=120)
    idempotency_key = models.CharField(max_length=64)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.tool} {self.idempotency_key[:12]}"


class RunWebhook(models.Model):
    """Where an external run's verdicts are sent (runs/external.py), signed with `secret`
    (HMAC-SHA256, shown to the caller once when the run starts)."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="webhook")
    url = models.URLField(max_length=2000)
    secret = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"webhook of run {self.run_id}"


class WebhookDelivery(models.Model):
    """One verdict sent to a run's webhook: its attempts and how the last one went."""

    webhook = models.ForeignKey(RunWebhook, on_delete=models.CASCADE, related_name="deliveries")
    escalation = models.OneToOneField(
        "escalations.Escalation", on_delete=models.CASCADE, related_name="webhook_delivery"
    )
    attempts = models.PositiveIntegerField(default=0)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # When the last attempt ended (the sweeper's clock: a delivery idle for long lost its
    # task), and when the sweeper gave up on it, having spent every attempt.
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    given_up_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"delivery of escalation {self.escalation_id} ({self.attempts} attempts)"
