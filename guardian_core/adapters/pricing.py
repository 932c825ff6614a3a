"""What a model call costs: prices per model, and the tokens and cost one reply reported.

Prices come from settings (GUARDIAN_MODEL_PRICES) and are passed in by the caller, so the
adapters stay free of Django. An OpenAI-compatible reply's `usage` field gives the tokens; a
model with no price costs 0 but its tokens still count against `max_tokens`.
"""

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Price:
    """US dollars (or any one currency, used for every budget) per million tokens."""

    input_per_million: float = 0.0
    output_per_million: float = 0.0


@dataclass(frozen=True)
class Spend:
    """Tokens and cost of one or more model calls."""

    tokens: int = 0
    cost: float = 0.0

    def __add__(self, other: "Spend") -> "Spend":
        return Spend(self.tokens + other.tokens, self.cost + other.cost)


NOTHING = Spend()


def price_table(raw: Mapping[str, Mapping[str, float]] | None) -> dict[str, Price]:
    """Parse {"model": {"input_per_million": 0.15, "output_per_million": 0.6}}; raises
    ValueError naming every bad entry."""
    problems: list[str] = []
    table: dict[str, Price] = {}
    for model, entry in (raw or {}).items():
        if not isinstance(entry, Mapping):
            problems.append(f"{model}: must be an object")
            continue
        unknown = sorted(set(entry) - {"input_per_million", "output_per_million"})
        if unknown:
            problems.append(f"{model}: unknown keys {unknown}")
        values = {}
        for key in ("input_per_million", "output_per_million"):
            value = entry.get(key, 0.0)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                problems.append(f"{model}.{key}: must be a number >= 0")
            else:
                values[key] = float(value)
        if len(values) == 2:
            table[str(model)] = Price(**values)
    if problems:
        raise ValueError("; ".join(problems))
    return table


def spend_from_usage(usage: object, price: Price | None) -> Spend:
    """The spend an OpenAI-compatible `usage` object reports; nothing if it is missing or
    malformed (a reply without usage is not an error, but it costs what it says: nothing)."""
    if not isinstance(usage, Mapping):
        return NOTHING
    prompt = _count(usage.get("prompt_tokens"))
    completion = _count(usage.get("completion_tokens"))
    total = _count(usage.get("total_tokens")) or prompt + completion
    if price is None:
        return Spend(total, 0.0)
    cost = (prompt * price.input_per_million + completion * price.output_per_million) / 1e6
    return Spend(total, cost)


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value
