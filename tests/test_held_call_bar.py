"""A held call's bar in the reviewers' queue and on the decision pane marks t* and the
uncertain band of the risk threshold, beside the guardian's probability."""

import re

import pytest

from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db


def test_a_held_refunds_bar_marks_t_star_and_the_band_in_the_queue_and_on_the_pane(
    client, reviewer
):
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    client.force_login(reviewer)
    for url in ("/escalations/", f"/escalations/{escalation.pk}/"):
        page = client.get(url).content.decode()
        bars = re.findall(r'<span class="pbar band-[^"]*">.*?</span></span>', page, re.S)
        assert bars, url
        assert all("pbar-tstar" in bar and "pbar-band" in bar for bar in bars), (url, bars)
        assert all(re.search(r"t\* 0\.\d\d±0\.\d\d", bar) for bar in bars), (url, bars)
