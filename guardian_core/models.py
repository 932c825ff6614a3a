"""Policy versions: the thresholds and question set a run is judged by, versioned together."""

from django.conf import settings
from django.db import models
from django.db.models import Q


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
        return f"v{self.number}" + (f" — {self.label}" if self.label else "")
