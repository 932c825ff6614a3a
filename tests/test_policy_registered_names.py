"""A policy version names only what is registered: each quorum tool is a registered tool (or
one an external run registered), and the judge's model is one this deployment knows (priced
in GUARDIAN_MODEL_PRICES, an OPENAI_*_MODEL, or listed in GUARDIAN_JUDGE_MODELS). An unknown
name is a field error, named."""

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from demo.setup import DEMO_QUESTION_SET_VERSION, DEMO_QUESTIONS
from policies.services import policy_version_create
from tests.factories import make_run
from tests.test_judge import THRESHOLDS

pytestmark = pytest.mark.django_db


def create(**content):
    return policy_version_create(
        thresholds=THRESHOLDS,
        question_set=dict(DEMO_QUESTIONS),
        question_set_version=DEMO_QUESTION_SET_VERSION,
        label="names",
        **content,
    )


def test_unknown_quorum_tools_and_judge_model_are_named_field_by_field(settings):
    settings.GUARDIAN_JUDGE_MODELS = ["judge-8b"]
    with pytest.raises(ValidationError) as refused:
        create(
            quorum={"tools": ["issue_refund", "isue_refund", "wire_money"]},
            judge={"adapter": "openai", "model": "judge-9b", "conditions": ["integrity"]},
        )
    errors = refused.value.message_dict
    assert errors["quorum"] == [
        "quorum.tools[1]: no tool named 'isue_refund' is registered",
        "quorum.tools[2]: no tool named 'wire_money' is registered",
    ]
    assert errors["judge"] == [
        "judge.model: no model named 'judge-9b' is registered (known: judge-8b); add it to "
        "GUARDIAN_JUDGE_MODELS or GUARDIAN_MODEL_PRICES"
    ]


def test_registered_names_pass_and_an_external_runs_tool_counts(settings):
    settings.GUARDIAN_JUDGE_MODELS = []
    settings.GUARDIAN_MODEL_PRICES = {"judge-8b": object()}
    make_run(actor="external", tools=["refund_order"])
    version = create(
        quorum={"tools": ["issue_refund", "refund_order"]},
        judge={"adapter": "openai", "model": "judge-8b", "conditions": ["integrity"]},
    )
    assert version.quorum["tools"] == ["issue_refund", "refund_order"]


def test_the_editor_marks_the_unknown_names_on_their_fields(admin_client, settings):
    settings.GUARDIAN_JUDGE_MODELS = ["judge-8b"]
    page = admin_client.get(reverse("policies:new"))
    form = page.context["form"]
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    data.update(quorum_tools="wire_money", judge_model="judge-9b", judge_conditions=["drift"])
    response = admin_client.post(reverse("policies:new"), {**data, "label": "names"})
    errors = response.context["form"].errors
    assert errors["quorum_tools"] == ["no tool named 'wire_money' is registered"]
    assert errors["judge_model"][0].startswith("no model named 'judge-9b' is registered")
