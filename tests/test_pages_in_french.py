"""Every page a role opens renders in French: asked for by the browser or chosen by the person.

The access matrix names every page and who opens it; each page is fetched in French by a
persona who may open it. A blocktranslate missing a variable, or a translation that breaks its
placeholder, fails here rather than in front of a French-speaking reviewer.
"""

import pytest
from django.urls import reverse

from tests.factories import make_escalation, make_run, make_turn
from tests.test_access_matrix import MATRIX, _api_objects

pytestmark = pytest.mark.django_db

PAGES = [
    param
    for param in MATRIX
    if param.values[1] == "GET"
    and not param.values[0].startswith(("api:", "admin:"))
    and param.values[0] not in ("metrics", "favicon", "healthz")
    and 200 in param.values[3].values()
]


def _url(url_name: str, kwargs: dict) -> str:
    if kwargs.get("run_id") == "run":
        kwargs = {**kwargs, "run_id": make_run().pk}
    if kwargs.get("run_id") == "turn_run":
        turn = make_escalation().turn
        kwargs = {**kwargs, "run_id": turn.run_id, "index": turn.index}
    if kwargs.get("escalation_id") == "escalation":
        kwargs = {**kwargs, "escalation_id": make_escalation(turn=make_turn()).pk}
    return reverse(url_name, kwargs=_api_objects(kwargs))


@pytest.mark.parametrize(("url_name", "method", "kwargs", "expected"), PAGES)
def test_the_page_renders_in_french(request, client, url_name, method, kwargs, expected):
    persona = next(name for name, answer in expected.items() if answer == 200)
    if persona != "anonymous":
        client.force_login(request.getfixturevalue(persona))
    response = client.get(_url(url_name, kwargs), headers={"accept-language": "fr"})
    assert response.status_code == 200
    if not response["Content-Type"].startswith("text/html"):
        return  # a download or a JSON answer: its keys are an interface
    page = response.content.decode()
    if "<html" not in page:
        return  # a fragment htmx swaps into a page (the page's own test covers its words)
    assert '<html lang="fr"' in page
    assert response.headers["Content-Language"] == "fr"
    if persona != "anonymous":
        assert "Se déconnecter" in page
        assert "Sign out" not in page


def test_there_is_a_page_for_every_role():
    names = {param.values[0] for param in PAGES}
    assert {"escalations:queue", "runs:list", "policies:list", "people:list", "login"} <= names


def test_the_queues_probability_bars_say_their_band_in_french(client, reviewer):
    from tests.runs_helpers import drive, start

    drive(start("injected_instruction"))
    client.force_login(reviewer)
    page = client.get("/escalations/", headers={"accept-language": "fr"}).content.decode()
    assert '<span class="pbar-band-word">déclenchée</span>' in page
    english = client.get("/escalations/", headers={"accept-language": "en"}).content.decode()
    assert '<span class="pbar-band-word">fired</span>' in english


def test_the_guardian_models_page_names_its_choices_in_french(client, admin):
    client.force_login(admin)

    page = client.get(reverse("policies:models"), headers={"accept-language": "fr"}).content
    page = page.decode()

    # Labels of model choices (job kinds, adapters) are words too, not only the templates'.
    assert "Réentraîner le gardien local" in page
    assert "Local (dans le processus)" in page
    assert "Retrain the local guardian" not in page


def _fired(detail: str = "p=0.910 is above t*=0.100") -> dict:
    return {
        "source": "integrity",
        "band": "fired",
        "outcome": "escalate",
        "detail": detail,
        "value": 0.91,
        "t_star": 0.1,
        "delta": 0.05,
    }


def _escalation_of(reason: dict):
    from runs.vocabulary import reason_summary
    from tests.factories import make_decision

    turn = make_turn()
    make_decision(turn=turn, outcome="escalate", reasons=[reason])
    return make_escalation(
        turn=turn,
        kind="uncertain",
        summary=reason_summary(reason["source"], reason["detail"]),
        reason={"triggered": [reason]},
    )


def test_a_reason_the_engine_recorded_in_english_reads_in_french(client, reviewer):
    escalation = _escalation_of(_fired("p=0.910 is above t*=0.100; fired on 2 of the last 3 turns"))
    client.force_login(reviewer)
    french = {"accept-language": "fr"}

    queue = client.get(reverse("escalations:queue"), headers=french).content.decode()
    pane = client.get(
        reverse("escalations:detail", args=[escalation.pk]), headers=french
    ).content.decode()

    # The clause the reason's fields say is worded; what only the text says stays as recorded.
    said = "p=0,910 au-dessus de t*=0,100; fired on 2 of the last 3 turns"
    assert f"Instructions injectées\xa0: {said}" in queue
    assert said in pane
    assert "p 0,91 · t* 0,10±0,05" in queue
    assert "is above" not in queue + pane


def test_a_recorded_detail_its_fields_do_not_say_is_shown_as_recorded(client, reviewer):
    # The words shown are never more than the record says: a detail that is not what its
    # fields give (another engine's, or an edited row) is shown as it is, in any language.
    escalation = _escalation_of(_fired("p=0.500 is above t*=0.100"))
    client.force_login(reviewer)

    pane = client.get(
        reverse("escalations:detail", args=[escalation.pk]), headers={"accept-language": "fr"}
    ).content.decode()

    assert "p=0.500 is above t*=0.100" in pane
    assert "p=0,910" not in pane
