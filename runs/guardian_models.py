"""The guardian model version a run asks: the active version of its adapter, and the guardian
that answers as that version (a calibration map over the base adapter or over another version,
or the local guardian retrained on its corpus plus labelled examples). The admins make and
activate versions (policies/learning.py); runs, shadow trials and the harness only read them
through here."""

from collections.abc import Sequence

from escalations.models import LabelledExample
from guardian_core.engine.conditions import Condition
from guardian_core.models import GuardianModelKind, GuardianModelVersion

# `claimed_id` when the caller has not read it (no claim read it along with the run).
UNREAD = object()


def guardian_model_version_active(
    *, adapter: str, claimed_id: int | None | object = UNREAD
) -> GuardianModelVersion | None:
    """The version runs on `adapter` use now, or None (they use the adapter as it is).

    `claimed_id` is the active version's id as the run's claim read it in the same statement
    (runs.services._claim, on PostgreSQL), None when none was active then: a turn with no
    version active reads nothing more, the common case on every step's hot path."""
    if claimed_id is None:
        return None
    if claimed_id is not UNREAD:
        return GuardianModelVersion.objects.filter(pk=claimed_id).first()
    return GuardianModelVersion.objects.filter(adapter=adapter, is_active=True).first()


def versioned_guardian(version: GuardianModelVersion, base: object, *, deadline_seconds: float):
    """`base` (the adapter's guardian as settings build it) as model version `version`.

    A version learnt on top of another base model than the one `base` now reports would apply
    what it learnt to a model it never saw: its answers are then all malformed (uncertain,
    escalated), and the reason names both versions, rather than silently uncalibrated."""
    from guardian_core.adapters.calibrated import CalibratedGuardian

    if version.kind == GuardianModelKind.RETRAINED:
        from guardian_core.adapters.local import LocalGuardian

        if base.model_version != version.base_model_version:  # the bundled corpus changed
            return CalibratedGuardian(
                base, {}, version.model_version, base_model_version=version.base_model_version
            )
        return LocalGuardian(
            deadline_seconds=deadline_seconds,
            model_version=version.model_version,
            extra_examples=lambda: teaching_examples(version.example_ids),
        )
    if version.over_id is not None:
        # Stacked: the maps sit on the answers of the version underneath, as it answers.
        base = versioned_guardian(version.over, base, deadline_seconds=deadline_seconds)
    return CalibratedGuardian(
        base,
        version.calibration,
        version.model_version,
        base_model_version=version.base_model_version,
    )


def teaching_examples(example_ids: Sequence[int]) -> dict[Condition, list[dict]]:
    """The labelled examples `example_ids` as training traces, by condition (what a retrained
    local guardian learns from besides its bundled corpus)."""
    out: dict[Condition, list[dict]] = {}
    rows = LabelledExample.objects.filter(pk__in=list(example_ids)).order_by("pk")
    for condition, projection, label in rows.values_list("condition", "projection", "label"):
        out.setdefault(Condition(condition), []).append(
            {"condition": condition, "projection": projection, "label": label}
        )
    return out
