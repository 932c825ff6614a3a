"""Template filters that say the decision log's codes in the run page's words (runs.vocabulary),
in the active language."""

from django import template

from runs import vocabulary
from runs.stop_reasons import stop_reason_text

register = template.Library()


@register.filter
def source_words(source: str) -> str:
    """ "integrity" → "Injected instructions"."""
    return vocabulary.source_words(str(source), translated=True)


@register.filter
def detail_words(reason: object) -> str:
    """A decision reason's detail: "p=0.930 is above t*=0.100" → "p=0,930 au-dessus de …"."""
    return vocabulary.detail_words(reason) if isinstance(reason, dict) else ""


@register.filter
def risk_words(risk_class: str) -> str:
    """ "reversible_write" → "Reversible write", as the reviewers' pages say a class."""
    return vocabulary.risk_words(str(risk_class), translated=True)


@register.filter
def band_words(band: str) -> str:
    """ "malformed" → "no usable answer"."""
    return vocabulary.band_words(str(band), translated=True)


@register.filter
def outcome_words(outcome: str, stop_reason: str = "") -> str:
    """ "stop_success" with "goal_reached" → "Stop with success — Goal reached"."""
    return vocabulary.outcome_words(str(outcome or ""), str(stop_reason or ""), translated=True)


@register.filter
def stop_words(stop_reason: str) -> str:
    """ "goal_reached" → "Goal reached", as the runs list says why a run ended."""
    return stop_reason_text(str(stop_reason or ""), translated=True)


_WORDS = {
    "source": vocabulary.source_words,
    "outcome": vocabulary.outcome_words,
    "stop": stop_reason_text,
}


@register.filter
def needs_code(code: str, kind: str) -> bool:
    """Whether the words for `code` (a "source", "outcome" or "stop" reason) hide it: the code
    is then shown beside them, muted, to match the export; "Escalate" needs no "escalate"."""
    code = str(code or "")
    return bool(code) and _WORDS[kind](code).lower() != code.replace("_", " ").lower()


@register.filter
def worker_error(last_error: str) -> str:
    """A run's last error without the sweeper's line: what a worker reported."""
    from runs.sweeps import SWEPT_PREFIX

    lines = str(last_error or "").split("\n")
    return "\n".join(line for line in lines if line and not line.startswith(SWEPT_PREFIX))


@register.filter
def swept_note(last_error: str) -> str:
    """The sweeper's line in a run's last error ("Swept at …: …; enqueued again."), or "": no
    worker wrote it, so the page does not call it a worker's error."""
    from runs.sweeps import SWEPT_PREFIX

    lines = str(last_error or "").split("\n")
    return next((line for line in lines if line.startswith(SWEPT_PREFIX)), "")


@register.filter
def mcp_upstream(mcp: object, tool: str) -> list | None:
    """An MCP session's tool as [server, its name there] (the run's config.mcp.upstreams), or
    None for a tool no upstream offers (Guardian's own reads, any other run)."""
    if not isinstance(mcp, dict):
        return None
    upstream = (mcp.get("upstreams") or {}).get(str(tool))
    return upstream if isinstance(upstream, list) and len(upstream) == 2 else None


@register.filter
def names_its_turn(summary: str, turn: object) -> bool:
    """Whether a history item already begins "turn N:" (the engine writes its steps so): the
    replay page then shows no turn label of its own before it."""
    return turn is not None and str(summary).startswith(f"turn {turn}:")
