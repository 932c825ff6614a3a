"""The French catalogues are complete and in step with the sources; every template word is marked.

The catalogues (locale/fr/LC_MESSAGES/django.po, and djangojs.po for the words the scripts in
static/js write themselves) are written here, by people; these tests are what keep them
whole: a word marked in the code but missing from them, an entry left empty or fuzzy, or a
template word nobody marked for translation fails the suite with its place named.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import polib
import pytest
from django.conf import settings
from django.utils import translation

from guardian_core.i18n_check import unmarked_in_source, unmarked_in_templates

ROOT = Path(settings.BASE_DIR)
FRENCH = ROOT / "locale" / "fr" / "LC_MESSAGES" / "django.po"
# Each gettext domain: the server's words (Python, templates) and the scripts' (static/js).
DOMAINS = ["django", "djangojs"]


def _french(domain: str) -> Path:
    return FRENCH.with_name(f"{domain}.po")


def _untranslated(entry: polib.POEntry) -> bool:
    if entry.msgid_plural:
        return not entry.msgstr_plural or not all(entry.msgstr_plural.values())
    return not entry.msgstr


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_french_entry_is_translated_and_none_is_fuzzy(domain):
    catalogue = polib.pofile(str(_french(domain)))
    assert not catalogue.metadata_is_fuzzy, "the catalogue's header is marked fuzzy"
    empty = [entry.msgid for entry in catalogue if not entry.obsolete and _untranslated(entry)]
    fuzzy = [entry.msgid for entry in catalogue if "fuzzy" in entry.flags]
    assert empty == [], f"{len(empty)} entries have no French: {empty[:20]}"
    assert fuzzy == [], f"{len(fuzzy)} entries are fuzzy (check, then drop the flag): {fuzzy[:20]}"


@pytest.mark.parametrize("domain", DOMAINS)
def test_the_french_catalogue_keeps_every_placeholder(domain):
    # A translation that drops or renames %(count)s raises (or lies) when the page renders.
    # xgettext flags no JavaScript entry as a format: there, every entry is checked.
    catalogue = polib.pofile(str(_french(domain)))
    wrong = []
    for entry in catalogue:
        if entry.obsolete or (domain == "django" and "python-format" not in entry.flags):
            continue
        for source, translated in _pairs(entry):
            if _placeholders(source) != _placeholders(translated):
                wrong.append((source, translated))
    assert wrong == []


def _pairs(entry: polib.POEntry) -> list[tuple[str, str]]:
    if not entry.msgid_plural:
        return [(entry.msgid, entry.msgstr)]
    return [(entry.msgid_plural, text) for text in entry.msgstr_plural.values()]


def _placeholders(text: str) -> set[str]:
    return set(re.findall(r"%\((\w+)\)", text))


@pytest.mark.skipif(
    shutil.which("xgettext") is None and not os.environ.get("CI"),
    reason="GNU gettext (xgettext) is not installed here; CI installs it",
)
@pytest.mark.parametrize("domain", DOMAINS)
def test_the_catalogue_holds_every_word_marked_in_the_sources(tmp_path, domain):
    """makemessages, run on a copy of the sources, adds nothing and drops nothing."""
    copy = tmp_path / "src"
    shutil.copytree(
        ROOT,
        copy,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "var", "node_modules", "__pycache__", "*.mo", "training", "tests"
        ),
        symlinks=True,
    )
    environment = {**os.environ, "GUARDIAN_VAR_DIR": str(tmp_path / "var")}
    subprocess.run(
        [sys.executable, "manage.py", "makemessages", "-l", "fr", "-d", domain, "--verbosity", "0"],
        cwd=copy,
        env=environment,
        check=True,
        capture_output=True,
    )
    french = _french(domain)
    extracted = {_key(e) for e in polib.pofile(str(copy / french.relative_to(ROOT)))}
    kept = {_key(e) for e in polib.pofile(str(french)) if not e.obsolete}
    assert sorted(extracted - kept) == [], "marked but not in the catalogue: run `make messages`"
    assert sorted(kept - extracted) == [], "in the catalogue, marked nowhere: run `make messages`"


def test_the_scripts_catalogue_holds_the_apps_scripts_only():
    # Not a vendored or test script (tests/vendor's axe), nor one collected under var/.
    places = {path for e in polib.pofile(str(_french("djangojs"))) for path, _ in e.occurrences}
    assert places
    assert all(path.startswith("static/js/") for path in places), places


def _key(entry: polib.POEntry) -> tuple[str, str, str]:
    return (entry.msgctxt or "", entry.msgid, entry.msgid_plural or "")


def test_every_template_word_is_marked_for_translation():
    unmarked = unmarked_in_templates(ROOT / "templates")
    assert unmarked == [], "template words not marked for translation:\n" + "\n".join(
        str(u) for u in unmarked
    )


def test_the_checker_finds_unmarked_text_and_passes_marked_text():
    source = (
        "{% load i18n %}<h1>{% translate 'Escalations' %}</h1>\n"
        "<p>Waiting for a person</p>\n"
        '<button title="Approve the call">{% translate "Approve" %}</button>\n'
        "{% blocktranslate trimmed with n=count %}{{ n }} runs waited{% endblocktranslate %}\n"
        '{# a comment in words #}{% comment %}More words{% endcomment %}<img alt="">\n'
        '<input type="submit" value="Send it"><span class="status-running">{{ x }}</span>'
        "<script>var words = 1;</script>"
    )
    found = [(u.line, u.text) for u in unmarked_in_source(source, "t.html")]
    assert found == [(2, "Waiting for a person"), (3, "Approve the call"), (6, "Send it")]


def test_the_checker_lets_names_and_numbers_be():
    source = "<td>Guardian</td><td>{{ a }} ms</td><td>p95</td><td>0.97</td><td>—</td>"
    assert unmarked_in_source(source, "t.html") == []


def test_french_is_what_a_page_speaks_when_asked(client):
    response = client.get("/accounts/login/", headers={"accept-language": "fr"})
    assert response.headers["Content-Language"] == "fr"
    assert '<html lang="fr"' in response.text
    with translation.override("fr"):
        assert translation.gettext("Sign out") == "Se déconnecter"


@pytest.mark.parametrize("with_gettext", [True, False], ids=["msgfmt", "polib"])
def test_compilemessages_writes_a_catalogue_django_reads(
    tmp_path, settings, monkeypatch, with_gettext
):
    """`make demo` compiles on laptops without GNU gettext too: both ways give the same words."""
    from django.core.management import call_command

    from guardian_core.management.commands import compilemessages

    if with_gettext and shutil.which("msgfmt") is None:
        pytest.skip("GNU gettext (msgfmt) is not installed here")
    if not with_gettext:
        monkeypatch.setattr(compilemessages, "find_command", lambda name: None)
    target = tmp_path / "locale" / "fr" / "LC_MESSAGES"
    target.mkdir(parents=True)
    shutil.copy(FRENCH, target / "django.po")
    settings.LOCALE_PATHS = [tmp_path / "locale"]
    call_command("compilemessages", verbosity=0)
    compiled = polib.mofile(str(target / "django.mo"))
    assert {entry.msgid: entry.msgstr for entry in compiled}["Sign out"] == "Se déconnecter"
    assert len(compiled) == len([e for e in polib.pofile(str(FRENCH)) if not e.obsolete])
