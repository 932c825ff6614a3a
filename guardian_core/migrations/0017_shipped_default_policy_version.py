"""A fresh database gets one active policy version: the shipped defaults (DESIGN.md's cost
ratios, the guardians' built-in questions, every limit at its default), recorded as an
activation like any other. A database that holds any policy version (an upgrade, an import)
is left as it is: the defaults are for a first start, not an edit of someone's policy."""

from django.db import migrations

SHIPPED_DEFAULT_LABEL = "Shipped defaults"
SHIPPED_DEFAULT_COMMENT = (
    "The shipped default, created by `migrate` on a fresh database: DESIGN.md's cost ratios "
    "and the guardians' built-in questions. Change it like any other version: make a new one "
    "and activate it."
)


def shipped_default_create(apps, schema_editor) -> None:
    # The defaults are read from the code at migrate time, not frozen here: a fresh install
    # starts with what this release ships (the engine's DEFAULT_COSTS, the questions the
    # guardians ask when a version names none), as `make demo` always has.
    from guardian_core.adapters.http import DEFAULT_QUESTION_SET_VERSION, DEFAULT_QUESTIONS
    from guardian_core.engine.thresholds import default_policy
    from guardian_core.policy_validation import policy_version_problems

    PolicyVersion = apps.get_model("guardian_core", "PolicyVersion")
    PolicyActivation = apps.get_model("policies", "PolicyActivation")
    if PolicyVersion.objects.exists():
        return
    thresholds = {
        condition.value: threshold.as_dict()
        for condition, threshold in default_policy().thresholds.items()
    }
    question_set = dict(DEFAULT_QUESTIONS)
    problems = policy_version_problems(
        thresholds=thresholds,
        question_set=question_set,
        question_set_version=DEFAULT_QUESTION_SET_VERSION,
        quorum={},
        judge={},
        limits={},
    )
    if problems:  # the code's own defaults: a release that breaks them must not ship a version
        raise RuntimeError("the shipped default policy version is invalid: " + "; ".join(problems))
    version = PolicyVersion.objects.create(
        number=1,
        label=SHIPPED_DEFAULT_LABEL,
        thresholds=thresholds,
        question_set=question_set,
        question_set_version=DEFAULT_QUESTION_SET_VERSION,
        quorum={},
        judge={},
        limits={},
        is_active=True,
    )
    PolicyActivation.objects.create(version=version, comment=SHIPPED_DEFAULT_COMMENT)


class Migration(migrations.Migration):
    dependencies = [
        ("guardian_core", "0016_guardian_model_version_over"),
        # PolicyActivation is the policies app's model (its table kept its old name).
        ("policies", "0004_guardian_model_job_over"),
    ]

    operations = [
        # Going back leaves the version: by then runs may be pinned to it, and an admin's
        # history names it.
        migrations.RunPython(shipped_default_create, migrations.RunPython.noop),
    ]
