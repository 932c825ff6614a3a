"""The reliability diagram of one condition as SVG geometry (numbers only): the evaluation
page's template draws it, so the page needs no script and no inline style."""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

# viewBox units. The plot is a square: a probability of 1 is as far across as a rate of 1 is up,
# so the diagonal (perfect calibration) is at 45°.
WIDTH = 360
LEFT = 46
TOP = 12
SIZE = 300
RIGHT = LEFT + SIZE
BOTTOM = TOP + SIZE
TICK_Y = BOTTOM + 16
STRIP_TOP = BOTTOM + 30
STRIP_HEIGHT = 44
STRIP_BOTTOM = STRIP_TOP + STRIP_HEIGHT
AXIS_LABEL_Y = STRIP_BOTTOM + 20
HEIGHT = AXIS_LABEL_Y + 8
DOT_MIN, DOT_MAX = 3.0, 8.0
TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class Dot:
    x: float
    y: float
    r: float
    title: str


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    title: str


@dataclass(frozen=True)
class ReliabilityChart:
    description: str
    dots: tuple[Dot, ...]
    bars: tuple[Bar, ...]
    curve: str  # polyline points through the dots, in bin order
    max_count: int
    band: tuple[float, float] | None  # x and width of t* ± δ, clipped to [0, 1]
    t_star_x: float | None
    t_star_text: str
    x_ticks: tuple[tuple[float, str], ...]  # (x, label): probability ticks and grid lines
    y_ticks: tuple[tuple[float, str], ...]  # (y, label): observed-rate ticks and grid lines

    # The fixed frame, for the template.
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    top: int = TOP
    right: int = RIGHT
    bottom: int = BOTTOM
    size: int = SIZE
    tick_y: int = TICK_Y
    strip_top: int = STRIP_TOP
    strip_bottom: int = STRIP_BOTTOM
    axis_label_y: int = AXIS_LABEL_Y
    middle_x: float = LEFT + SIZE / 2
    middle_y: float = TOP + SIZE / 2
    y_tick_x: int = LEFT - 6


def _x(p: float) -> float:
    return round(LEFT + min(max(p, 0.0), 1.0) * SIZE, 2)


def _y(rate: float) -> float:
    return round(BOTTOM - min(max(rate, 0.0), 1.0) * SIZE, 2)


def reliability_chart(
    condition: str, curve: Sequence[Mapping], policy: Mapping | None, *, ece: float | None
) -> ReliabilityChart | None:
    """The diagram of the harness's reliability curve (engine/evaluation.py): each non-empty
    bin a dot at (mean predicted, observed rate) sized by its rows, the rows per bin as bars
    under the plot, the diagonal, and t* with its band from `policy`. None when no row was
    scored (there is nothing to draw)."""
    counts = [b["count"] for b in curve]
    if not curve or not any(counts):
        return None
    max_count = max(counts)
    dots, bars = [], []
    for b in curve:
        span = f"[{b['lower']:.3f}, {b['upper']:.3f})"
        rows = ngettext("%(count)d row", "%(count)d rows", b["count"]) % {"count": b["count"]}
        # A bar per bin, empty ones too, so the strip shows where the rows are not.
        height = round(STRIP_HEIGHT * b["count"] / max_count, 2)
        x0, x1 = _x(b["lower"]), _x(b["upper"])
        bars.append(
            Bar(
                x=x0,
                y=round(STRIP_BOTTOM - height, 2),
                width=round(max(x1 - x0 - 1, 0.5), 2),
                height=height,
                title=f"{span}: {rows}",
            )
        )
        if b["count"]:
            # Area, not radius, grows with the rows: a bin of 4× the rows looks 4× as big.
            r = DOT_MIN + (DOT_MAX - DOT_MIN) * math.sqrt(b["count"] / max_count)
            dots.append(
                Dot(
                    x=_x(b["mean_predicted"]),
                    y=_y(b["observed_rate"]),
                    r=round(r, 2),
                    title=_("%(span)s: %(rows)s, predicted %(predicted)s, observed %(observed)s")
                    % {
                        "span": span,
                        "rows": rows,
                        "predicted": f"{b['mean_predicted']:.3f}",
                        "observed": f"{b['observed_rate']:.3f}",
                    },
                )
            )
    band, t_star_x, t_star_text = None, None, ""
    if policy:
        t_star, delta = policy["t_star"], policy["delta"]
        low, high = max(t_star - delta, 0.0), min(t_star + delta, 1.0)
        band = (_x(low), round(_x(high) - _x(low), 2))
        t_star_x = _x(t_star)
        t_star_text = _("t* %(t_star)s, uncertain band %(low)s – %(high)s") % {
            "t_star": f"{t_star:.3f}",
            "low": f"{t_star - delta:.3f}",
            "high": f"{t_star + delta:.3f}",
        }
    description = (
        _("Reliability of %(condition)s: %(rows)s scored rows in %(bins)s bins")
        % {"condition": condition, "rows": sum(counts), "bins": len(curve)}
        + (f", ECE {ece:.3f}" if ece is not None else "")
        + ". "
        + _(
            "Predicted probability across, observed rate of the positive class up; the "
            "diagonal is perfect calibration"
        )
        + (
            "; " + _("the line is t* and the shaded band t* ± δ (%(band)s)") % {"band": t_star_text}
            if policy
            else ""
        )
        + "; "
        + _("the bars under the plot are the rows per bin.")
    )
    return ReliabilityChart(
        description=description,
        dots=tuple(dots),
        bars=tuple(bars),
        curve=" ".join(f"{d.x},{d.y}" for d in dots),
        max_count=max_count,
        band=band,
        t_star_x=t_star_x,
        t_star_text=t_star_text,
        x_ticks=tuple((_x(t), f"{t:g}") for t in TICKS),
        y_ticks=tuple((_y(t), f"{t:g}") for t in TICKS),
    )
