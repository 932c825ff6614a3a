"""The records every room reads: policy versions (the thresholds and question set a run is
judged by, versioned together), guardian model versions (what a run's guardian answers as) and
API tokens. The admins' room writes the versions (policies/)."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from guardian_core.engine.thresholds import Budgets
from guardian_core.policy_validation import (
    LIMIT_DEFAULTS,
    LIMIT_HELP,
    escalation_hours,
    hysteresis_of,
    policy_version_problems,
)
from guardian_core.untrusted import bidi_visible


class PolicyVersion(models.Model):
    """One immutable-once-used set of thresholds and guardian questions.

    A run pins the version active when it starts. From then on the content of the version may
    not change (a database trigger, added in the runs migrations, refuses it), so every
    decision in the log can be replayed against exactly the thresholds it was taken with.
    """

    number = models.PositiveIntegerField(unique=True)
    label = models.CharField(max_length=120, blank=True)
    thresholds = models.JSONField(
        help_text="Per condition: C_stop, C_cont, the derived t* and the uncertain band δ."
    )
    question_set = models.JSONField(help_text="Per condition: the typed question asked.")
    question_set_version = models.CharField(max_length=40)
    # Two distinct approvers for some held calls: {"regulated": true, "tools": ["issue_refund"]}.
    quorum = models.JSONField(default=dict, blank=True)
    # The second-tier judge on the uncertain band (engine/judge.py); {} is no judge:
    # {"adapter": "openai", "model": "…", "conditions": ["goal_reached"], "timeout_seconds": 10}.
    judge = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            "The second-tier judge on the uncertain band: adapter, model, the conditions it "
            "may settle, timeout_seconds. Empty: no judge."
        ),
    )
    # Hysteresis, replans, the repeat limit, the run caps and the escalation deadline
    # (policy_validation.LIMIT_DEFAULTS); a key left out keeps the default, so versions stored
    # before a key existed replay as they were.
    limits = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            "drift_window, drift_required, stagnation_window, stagnation_required (or the "
            "run-wide hysteresis_window, hysteresis_required), max_replans, repeat_limit, "
            "max_turns, max_tokens, max_cost, max_wall_seconds, escalation_hours; a key left out "
            "keeps its default."
        ),
    )
    # The version this one was edited from (the new-version page's ?from=): what its diff is
    # read against first and what a reworded question is measured from. PROTECT, not
    # SET_NULL: a version's lineage is part of who changed what, and versions are never
    # deleted (the Django admin refuses it), so a delete that would erase it must fail loudly.
    copied_from = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="copies",
        help_text="The version this one was copied from and edited.",
    )
    is_active = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-number"]
        permissions = [("manage_policy", "Can manage policy versions")]
        constraints = [
            # New runs pin "the active version": there can be only one.
            models.UniqueConstraint(
                fields=["is_active"], condition=Q(is_active=True), name="one_active_policy_version"
            ),
            models.CheckConstraint(condition=Q(number__gte=1), name="policy_version_number_gte_1"),
        ]

    def __str__(self) -> str:
        # Wherever a version is named (pages, selects, the admin), its label's bidirectional
        # controls are written out: an admin's text is not to reorder what others read.
        return f"v{self.number}" + (f" — {bidi_visible(self.label)}" if self.label else "")

    def clean(self) -> None:
        """Every problem of the content at once, each under the field it belongs to (the admin
        form shows them there); the same rules the services and the run mapping apply."""
        problems = self.problems()
        if problems:
            raise ValidationError(problems_by_field(problems))

    def problems(self) -> list[str]:
        """What is wrong with this version's content; [] when it is valid."""
        return policy_version_problems(
            thresholds=self.thresholds,
            question_set=self.question_set,
            question_set_version=self.question_set_version,
            quorum=self.quorum,
            judge=self.judge,
            limits=self.limits,
        )

    def limits_in_force(self) -> list[dict]:
        """Each limit a run pinned to this version is judged by, with whether it is the default
        (kept by a version stored before the key was part of it), what the default means, and
        what it does."""
        stored = self.limits or {}
        hysteresis = hysteresis_of(stored)
        rows = []
        for key, default in LIMIT_DEFAULTS.items():
            if key in ("hysteresis_window", "hysteresis_required"):
                continue  # what the per-condition rows fall back to, shown there
            value = stored.get(key, default)
            condition, _sep, part = key.partition("_")
            if condition in hysteresis and part in ("window", "required"):
                value = hysteresis[condition][0 if part == "window" else 1]
                default_means = ""
            elif key == "escalation_hours":
                value = escalation_hours(stored)
                default_means = "GUARDIAN_ESCALATION_HOURS"
            elif default is None:
                engine = getattr(Budgets(), key)
                default_means = _("the run's own budget, else %(engine)s") % {
                    "engine": engine or _("none")
                }
            else:
                default_means = ""
            rows.append(
                {
                    "key": key,
                    "value": value,
                    "is_default": key not in stored,
                    "default_means": default_means,
                    "help": LIMIT_HELP[key],
                }
            )
        return rows


def problems_by_field(problems: list[str]) -> dict[str, list[str]]:
    """{"thresholds": ["thresholds.integrity.c_stop: must be …", …], …}: each message keeps its
    full path, grouped under the model field it starts with."""
    grouped: dict[str, list[str]] = {}
    for problem in problems:
        field_name = problem.split(":", 1)[0].split(".", 1)[0]
        grouped.setdefault(field_name, []).append(problem)
    return grouped


class ApiToken(models.Model):
    """A machine's credential for the API: `Authorization: Bearer <token>` acts as `user`.

    Only the SHA-256 of the token is stored: it is shown once, when an admin creates it, and
    cannot be read back. `prefix` (the token's first characters) names it in lists and logs.
    A revoked token stays, so the log of who used what keeps its meaning.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=120, help_text="What uses it, e.g. “billing webhook”.")
    prefix = models.CharField(max_length=16, editable=False)
    # The authentication class finds a token by this digest: unique, hence indexed.
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class GuardianAdapter(models.TextChoices):
    """The guardian adapters a model version can sit on (runs name them in `Run.guardian`)."""

    LOCAL = "local", _("Local (in process)")
    ONNX = "onnx", _("Your ONNX classifiers, with the local guardian (in process)")
    HTTP = "http", _("Vendor HTTP endpoint")
    OPENAI = "openai", _("OpenAI-compatible server")


class GuardianModelKind(models.TextChoices):
    RECALIBRATED = "recalibrated", _("Recalibrated (a map over the base model's probabilities)")
    RETRAINED = (
        "retrained",
        _("Retrained (the local guardian on its corpus plus labelled examples)"),
    )


class GuardianModelVersion(models.Model):
    """A guardian model learnt from labelled examples, used by runs only once activated.

    Recalibrated: the base adapter's answers (or version `over`'s) mapped, per condition, by
    `calibration` ({condition: {"method": "isotonic", "x": [...], "y": [...]} or {"method":
    "platt", "a", "b"}, with the "prior" it was fitted at and answers at; see
    guardian_core/engine/calibration.py). Retrained: the local guardian retrained
    at first use from its bundled corpus plus the examples in `example_ids` (no model is
    stored). Either way `example_ids` and `examples_digest` say what it learnt from, and
    `figures` what it scored on the held-out examples before and after, per condition.
    Append-only but for `is_active`.
    """

    Adapter = GuardianAdapter
    Kind = GuardianModelKind

    number = models.PositiveIntegerField(unique=True)
    adapter = models.CharField(max_length=20, choices=Adapter)
    # What the base guardian reports: answers logged under another base are not this model's.
    base_model_version = models.CharField(max_length=90)
    kind = models.CharField(max_length=20, choices=Kind)
    calibration = models.JSONField(default=dict, blank=True)
    # A recalibrated version stacked on another version (say a retrained local guardian): its
    # maps sit on that version's answers, not on the adapter as it ships.
    over = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="calibrations"
    )
    example_ids = models.JSONField(default=list, blank=True)
    # SHA-256 over the examples' content in id order: the same ids edited would not match.
    examples_digest = models.CharField(max_length=64)
    figures = models.JSONField(default=dict, blank=True)
    is_active = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-number"]
        constraints = [
            # runs/ports.py build_guardian wraps a run's guardian with "the active version of
            # its adapter": there can be only one.
            models.UniqueConstraint(
                fields=["adapter"],
                condition=Q(is_active=True),
                name="one_active_guardian_model_per_adapter",
            ),
            models.CheckConstraint(
                condition=Q(number__gte=1), name="guardian_model_version_number_gte_1"
            ),
            models.CheckConstraint(
                condition=Q(adapter__in=GuardianAdapter.values),
                name="guardian_model_version_adapter_known",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=GuardianModelKind.values),
                name="guardian_model_version_kind_known",
            ),
        ]

    def __str__(self) -> str:
        return self.model_version

    @property
    def model_version(self) -> str:
        """What the decision log records for answers of this version: its base and itself,
        e.g. `local-2+ab12cd34ef56/cal-4` (≤ 120 characters, the log's column)."""
        suffix = "cal" if self.kind == GuardianModelKind.RECALIBRATED else "train"
        return f"{self.base_model_version}/{suffix}-{self.number}"

    @property
    def conditions(self) -> list[str]:
        """The conditions it answers differently from its base: those it has a map for, or
        (retrained) those it was retrained on."""
        return list(self.calibration or self.figures or {})


class PersonPreferences(models.Model):
    """How one person reads Guardian: their language, time zone and keyboard shortcuts.

    A blank language is the browser's (Accept-Language), a blank time zone the server's
    (TIME_ZONE). Shortcuts can be turned off (WCAG 2.1.4): a speech-input user's words must
    not approve a held call. A person without a row has the defaults.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="preferences"
    )
    language = models.CharField(max_length=8, blank=True, choices=settings.LANGUAGES)
    time_zone = models.CharField(max_length=64, blank=True)
    keyboard_shortcuts = models.BooleanField(default=True)

    class Meta:
        verbose_name_plural = "person preferences"

    def __str__(self) -> str:
        return f"preferences of user {self.user_id}"
