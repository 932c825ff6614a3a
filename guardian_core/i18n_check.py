"""Finds words in templates that are not marked for translation (the translation test's check).

A template's text is what a person reads: the text between tags and the attributes a browser
shows or says (title, alt, placeholder, aria-label, aria-description, a button's value). The
Django template lexer splits a template into text and tags; text inside {% translate %} or
{% blocktranslate %} is marked, and any other text with a word in it is reported, with its
file and line. Names (Guardian, JSON, ECE…) are not words to translate (NOT_WORDS).
"""

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from django.template.base import Lexer, TokenType

# Attributes whose value a person reads or hears.
READ_ATTRIBUTES = frozenset(
    {"title", "alt", "placeholder", "aria-label", "aria-description", "aria-roledescription"}
)
# Names, units and symbols that are the same in every language this project speaks.
NOT_WORDS = frozenset(
    {
        "Guardian",
        "API",
        "JSON",
        "ECE",
        "URL",
        "MCP",
        "ONNX",
        "OpenAPI",
        "Swagger",
        "ms",
        "p50",
        "p95",
        "p99",
        "id",
        "ok",
        "OK",
        "vs",
        "t",
        "δ",
        "p",
        "n",
        "AUC",
        "ROC",
        "CSV",
        "JSONL",
        "SHA",
        "HMAC",
        "UTC",
        "AUROC",
        "Brier",
        "phi",
        "C_stop",
        "C_cont",
        "stop",
        "cont",
    }
)
WORD = re.compile(r"[^\W\d_]{2,}", re.UNICODE)
# Stands in for a template tag or variable inside the text handed to the HTML parser.
HOLE = "\x00"


@dataclass(frozen=True)
class Unmarked:
    template: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.template}:{self.line}: {self.text!r}"


def _words(text: str) -> list[str]:
    return [word for word in WORD.findall(text.replace(HOLE, " ")) if word not in NOT_WORDS]


class _TextCollector(HTMLParser):
    """The person-visible text and attributes of an HTML snippet, with their line offsets."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[int, str]] = []
        self._skip = 0  # inside <script> or <style>

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in {"script", "style"}:
            self._skip += 1
        line = self.getpos()[0]
        shown = dict(attrs)
        for name, value in attrs:
            if value is None:
                continue
            if name in READ_ATTRIBUTES or (
                name == "value"
                and tag == "input"
                and shown.get("type") in {"submit", "button", "reset"}
            ):
                self.found.append((line, value))

    def handle_endtag(self, tag: str) -> None:
        if tag in {"script", "style"} and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.found.append((self.getpos()[0], data))


def unmarked_in_source(source: str, name: str) -> list[Unmarked]:
    """Every piece of person-visible text in one template that is not marked for translation."""
    tokens = Lexer(source).tokenize()
    # The template with its marked text and its tags and variables replaced by holes, so the
    # HTML parser sees the page's structure and only unmarked text is left as words.
    pieces: list[str] = []
    translating = 0  # inside {% blocktranslate %} … {% endblocktranslate %}
    commenting = 0  # inside {% comment %} … {% endcomment %}
    for token in tokens:
        if token.token_type == TokenType.BLOCK:
            command = token.contents.split()[0] if token.contents.split() else ""
            if command in {"blocktranslate", "blocktrans"}:
                translating += 1
            elif command in {"endblocktranslate", "endblocktrans"}:
                translating -= 1
            elif command == "comment":
                commenting += 1
            elif command == "endcomment":
                commenting -= 1
            # A space, not a hole: a tag may sit in an HTML tag (<tr{% if x %} class="a">).
            pieces.append(" ")
        elif token.token_type == TokenType.TEXT and not translating and not commenting:
            pieces.append(token.contents)
        elif token.token_type == TokenType.TEXT:
            # Keep the line count right for what follows.
            pieces.append("\n" * token.contents.count("\n"))
        else:
            pieces.append(HOLE)
    collector = _TextCollector()
    collector.feed("".join(pieces))
    collector.close()
    return [
        Unmarked(name, line, " ".join(text.replace(HOLE, "…").split()))
        for line, text in collector.found
        if _words(text)
    ]


def unmarked_in_templates(root: Path) -> list[Unmarked]:
    """Every unmarked piece of text in the templates under root."""
    found: list[Unmarked] = []
    for path in sorted(root.rglob("*.html")):
        name = str(path.relative_to(root))
        found.extend(unmarked_in_source(path.read_text(encoding="utf-8"), name))
    return found
