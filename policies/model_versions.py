"""Finding a guardian model version by number, and the learning loop's error: what the harness,
the gates and the learning loop share without importing each other."""

from django.utils.translation import gettext as _

from guardian_core.models import GuardianModelVersion


class LearningError(Exception):
    """A version cannot be made or activated; the message names every reason."""


def guardian_model_version_get(*, number: int) -> GuardianModelVersion:
    version = GuardianModelVersion.objects.filter(number=number).first()
    if version is None:
        known = ", ".join(
            str(n)
            for n in GuardianModelVersion.objects.order_by("number").values_list(
                "number", flat=True
            )
        )
        raise LearningError(
            _("no guardian model version %(number)s (known: %(known)s)")
            % {"number": number, "known": known or _("none")}
        )
    return version
