"""The words the scripts write themselves (static/js: the queue's selection summary and bulk
question, the decision pane's countdown) in the person's language, from Django's JavaScript
catalogue (/jsi18n/, locale/*/LC_MESSAGES/djangojs.po), under the CSP; tool names stay text in
their own <bdi>.

The same steps run in English and in French: the English words are the ones the queue and
decision tests assert too (tests/test_browser_queue.py)."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, expect

from escalations.models import EscalationKind
from tests.conftest import PERSONA_PASSWORD
from tests.test_browser_csp import LISTEN
from tests.test_escalation_queue_page import queued

pytestmark = pytest.mark.browser

NBSP = "\u00a0"  # French puts one before ":", ";", "?" and inside « »

# {gated}, {other}, {injected}: the escalations' numbers.
WORDS = {
    "en": {
        "mixed": (
            "3 selected: Irreversible or regulated step holding issue_refund. "
            "#{injected} (Injected instructions with no tool) cannot go with #{gated} "
            "(Irreversible or regulated step holding issue_refund); it would be left open."
        ),
        "reject_question": "Reject 2 held issue_refund calls?",
        "reject_detail": (
            "They will not run; each agent gets your reason and proposes again. "
            "Reason: “Not this week”."
        ),
        "reject_apart": (
            "#{injected} (Injected instructions with no tool) cannot go with #{gated} "
            "(Irreversible or regulated step holding issue_refund); it stays open."
        ),
        "reject_yes": "Reject 2",
        "together": (
            "2 selected: Irreversible or regulated step holding issue_refund. "
            "Each gets its own verdict."
        ),
        "approve_question": "Approve 2 held issue_refund calls?",
        "approve_detail": "They will run.",
        "approve_yes": "Approve 2",
        "reject_selected": "Reject selected",
        "approve_selected": "Approve selected",
        "cancel": "Cancel",
        "countdown": "in 1 d 3 h",
    },
    "fr": {
        "mixed": (
            f"3 éléments sélectionnés{NBSP}: Étape irréversible ou réglementée retenant "
            "issue_refund. Le n° {injected} (Instructions injectées sans outil) ne peut pas être "
            "décidé avec le n° {gated} (Étape irréversible ou réglementée retenant "
            f"issue_refund){NBSP}; il resterait ouvert."
        ),
        "reject_question": f"Rejeter 2 appels issue_refund retenus{NBSP}?",
        "reject_detail": (
            f"Ils ne s’exécuteront pas{NBSP}; chaque agent reçoit votre motif et propose de "
            f"nouveau. Motif{NBSP}: «{NBSP}Pas cette semaine{NBSP}»."
        ),
        "reject_apart": (
            "Le n° {injected} (Instructions injectées sans outil) ne peut pas être décidé avec "
            f"le n° {{gated}} (Étape irréversible ou réglementée retenant issue_refund){NBSP}; "
            "il reste ouvert."
        ),
        "reject_yes": "Rejeter 2 éléments",
        "together": (
            f"2 éléments sélectionnés{NBSP}: Étape irréversible ou réglementée retenant "
            "issue_refund. Chacun reçoit son propre verdict."
        ),
        "approve_question": f"Approuver 2 appels issue_refund retenus{NBSP}?",
        "approve_detail": "Ils s’exécuteront.",
        "approve_yes": "Approuver 2 éléments",
        "reject_selected": "Rejeter la sélection",
        "approve_selected": "Approuver la sélection",
        "cancel": "Annuler",
        "countdown": "dans 1 j 3 h",
    },
}
REASON = {"en": "Not this week", "fr": "Pas cette semaine"}


@pytest.mark.parametrize("language", ["en", "fr"])
def test_the_queue_and_the_countdown_speak_the_persons_language(
    live_server, browser: Browser, reviewer, language
):
    # A deadline far from a unit's boundary: the countdown reads the same for minutes.
    deadline = timezone.now() + timedelta(days=1, hours=3, minutes=30)
    gated, other = queued(deadline=deadline), queued(deadline=deadline)
    injected = queued(kind=EscalationKind.INTEGRITY, source="integrity", deadline=deadline)
    words = {
        key: text.format(gated=gated.pk, injected=injected.pk)
        for key, text in WORDS[language].items()
    }
    context = browser.new_context(locale=language, extra_http_headers={"Accept-Language": language})
    context.add_init_script(LISTEN)  # records each CSP violation the page reports
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on(
        "console",
        lambda message: problems.append(message.text) if message.type == "error" else None,
    )
    try:
        page.goto(f"{live_server.url}/accounts/login/")
        page.locator("#id_username").fill("reviewer")
        page.locator("#id_password").fill(PERSONA_PASSWORD)
        with page.expect_navigation():
            page.locator("main form button[type=submit]").click()
        expect(page).to_have_url(f"{live_server.url}/escalations/")
        expect(page.locator("html")).to_have_attribute("lang", language)
        page.wait_for_load_state("domcontentloaded")
        assert page.evaluate("window.guardianQueue") is True
        # The catalogue ran before the page's script: Django's functions are there.
        assert page.evaluate("typeof window.ngettext") == "function"

        def row(escalation):
            return page.locator(f'.queue-row[data-escalation-id="{escalation.pk}"] .queue-pick')

        for escalation in (gated, other, injected):
            row(escalation).check()
        selection = page.locator("#bulk-selection")
        expect(selection).to_have_text(words["mixed"])
        # Each tool name is its own <bdi>, as text: two descriptions, two names.
        expect(selection.locator("bdi")).to_have_text(["issue_refund", "issue_refund"])

        page.locator("#bulk-reason").fill(REASON[language])
        page.get_by_role("button", name=words["reject_selected"]).click()
        dialog = page.get_by_role("dialog", name=words["reject_question"])
        expect(dialog).to_be_visible()
        question = dialog.locator("#bulk-confirm-question")
        expect(question).to_have_text(words["reject_question"])
        expect(question.locator("bdi")).to_have_text("issue_refund")
        expect(dialog.locator("#bulk-confirm-detail")).to_have_text(words["reject_detail"])
        expect(dialog.locator("#bulk-confirm-apart li")).to_have_text(words["reject_apart"])
        expect(dialog.get_by_role("button", name=words["reject_yes"])).to_be_focused()
        dialog.get_by_role("button", name=words["cancel"]).click()
        expect(dialog).to_be_hidden()

        row(injected).uncheck()
        expect(selection).to_have_text(words["together"])
        expect(selection.locator("bdi")).to_have_text("issue_refund")
        page.get_by_role("button", name=words["approve_selected"]).click()
        dialog = page.get_by_role("dialog", name=words["approve_question"])
        expect(dialog).to_be_visible()
        expect(dialog.locator("#bulk-confirm-question bdi")).to_have_text("issue_refund")
        expect(dialog.locator("#bulk-confirm-detail")).to_have_text(words["approve_detail"])
        expect(dialog.locator("#bulk-confirm-apart")).to_be_hidden()
        expect(dialog.get_by_role("button", name=words["approve_yes"])).to_be_focused()
        page.keyboard.press("Escape")
        expect(dialog).to_be_hidden()
        assert page.evaluate("window.__violations") == []

        # The decision pane: the server writes the countdown, the script keeps it true. Blanked
        # here, it comes back from the script, in the page's language, at the next tick (30 s
        # on the page's clock).
        page.clock.install()
        page.goto(f"{live_server.url}/escalations/{gated.pk}/")
        countdown = page.locator("time[data-countdown]")
        expect(countdown).to_have_text(words["countdown"])  # the server's words
        page.wait_for_load_state("domcontentloaded")
        assert page.evaluate("window.guardianDecision") is True
        page.evaluate("document.querySelector('time[data-countdown]').textContent = ''")
        page.clock.run_for(31_000)
        expect(countdown).to_have_text(words["countdown"])
        assert page.evaluate("window.__violations") == []
    finally:
        context.close()
    assert problems == [], "no script error and no CSP refusal"
