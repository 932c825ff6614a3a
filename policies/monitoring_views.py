"""The admins' monitoring page: probabilities and escalations per day, shift, agreement,
suggested thresholds offered as an editable draft, and correlated errors."""

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET

from guardian_core.engine import correlated_errors
from guardian_core.engine.conditions import Condition
from guardian_core.models import PolicyVersion
from guardian_core.roles import manage_policy
from policies import monitoring
from policies.forms import threshold_field

# SVG geometry (viewBox units). The charts fill the content's width (guardian.css), never
# narrower than CHART_MIN_PX, so text of FONT units is at least 12 px on any screen (a narrow
# one scrolls the chart sideways in its box).
CHART_W = 1000
CHART_MIN_PX = 720
FONT = 17  # 17 × 720 / 1000 = 12.2 px at the narrowest
LEFT, RIGHT_PAD, TOP = 96, 12, 12
PLOT_W = CHART_W - LEFT - RIGHT_PAD
CELL_H = 24  # a probability bin of the heat map
BARS_H = 220  # the escalation rate's plot


def _x_axis(days: list[monitoring.Day], bottom: float) -> dict:
    """The day axis under a plot: a tick label per day (every other one when they crowd) and
    the axis's label."""
    column = PLOT_W / max(len(days), 1)
    every = 1 if column >= 80 else 2
    return {
        "column": round(column, 2),
        "x_ticks": [
            (round(LEFT + c * column + column / 2, 2), f"{day.day:%d %b}")
            for c, day in enumerate(days)
            if (len(days) - 1 - c) % every == 0  # the last day always labelled
        ],
        "tick_label_y": bottom + FONT + 8,
        "x_label_y": bottom + 2 * FONT + 22,
        "x_label_x": LEFT + PLOT_W / 2,
        "height": bottom + 2 * FONT + 30,
    }


def _frame(bottom: float, y_ticks: list[tuple[float, str]], y_label: str) -> dict:
    return {
        "width": CHART_W,
        "font": FONT,
        "left": LEFT,
        "right": LEFT + PLOT_W,
        "top": TOP,
        "bottom": bottom,
        "y_ticks": y_ticks,
        "y_tick_x": LEFT - 10,  # the tick labels end here; the tick marks run to the axis
        "y_mark_x": LEFT - 6,
        "y_label": y_label,
        "y_label_x": FONT + 2,
        "y_label_y": round((TOP + bottom) / 2, 2),
    }


def _heatmap(days: list[monitoring.Day], condition: str) -> dict:
    bottom = TOP + monitoring.BINS * CELL_H
    axis = _x_axis(days, bottom)
    column = axis["column"]
    cells = []
    for c, day in enumerate(days):
        counts = day.counts.get(condition, [0] * monitoring.BINS)
        total = sum(counts)
        for b, n in enumerate(counts):
            if not n:
                continue
            share = n / total
            cells.append(
                {
                    "x": round(LEFT + c * column + 1, 2),
                    "y": TOP + (monitoring.BINS - 1 - b) * CELL_H + 1,
                    "opacity": round(0.15 + 0.85 * share, 3),
                    "title": _("%(day)s: %(n)s of %(total)s in %(low)s–%(high)s")
                    % {
                        "day": day.day,
                        "n": n,
                        "total": total,
                        "low": f"{b / 10:.1f}",
                        "high": f"{(b + 1) / 10:.1f}",
                    },
                }
            )
    ticks = [
        (TOP + (monitoring.BINS - i) * CELL_H, f"{i / monitoring.BINS:.1f}")
        for i in range(0, monitoring.BINS + 1, 2)
    ]
    return {
        **_frame(bottom, ticks, _("probability")),
        **axis,
        "cells": cells,
        "cell_w": round(column - 2, 2),
        "cell_h": CELL_H - 2,
    }


def _rate_scale(days: list[monitoring.Day]) -> float:
    """The escalation axis's top: the least of ¼, ½ and 1 above every day's rate, so a low rate
    is not a sliver at the foot of a 0–100% axis."""
    highest = max((day.escalation_rate or 0 for day in days), default=0)
    return next(top for top in (0.25, 0.5, 1.0) if highest <= top)


def _escalation_bars(days: list[monitoring.Day]) -> dict:
    bottom = TOP + BARS_H
    axis = _x_axis(days, bottom)
    column = axis["column"]
    scale = _rate_scale(days)
    bars = []
    for c, day in enumerate(days):
        rate = day.escalation_rate
        h = round(min((rate or 0) / scale, 1.0) * BARS_H, 2)
        bars.append(
            {
                "x": round(LEFT + c * column + 3, 2),
                "y": round(bottom - h, 2),
                "height": h,
                "title": _("%(day)s: %(escalations)s escalations of %(decisions)s decisions")
                % {"day": day.day, "escalations": day.escalations, "decisions": day.decisions},
            }
        )
    ticks = [
        (round(bottom - BARS_H * i / 4, 2), f"{scale * i / 4:.1%}".replace(".0%", "%"))
        for i in range(5)
    ]
    return {
        # Translators: the y axis of the chart of the share of decisions escalated per day.
        **_frame(bottom, ticks, _("escalated")),
        **axis,
        "bars": bars,
        "bar_w": round(column - 6, 2),
    }


def draft_url(version: PolicyVersion, suggestions: list[monitoring.Suggestion]) -> str:
    """The new-version page copying `version`, with each suggestion's δ over the copy (the
    page applies any parameter named like one of its fields); the costs stay the version's."""
    query: dict[str, object] = {"from": version.pk}
    for suggestion in suggestions:
        if suggestion.best is not None:
            query[threshold_field(suggestion.condition, "delta")] = f"{suggestion.best.delta:g}"
    return f"{reverse('policies:new')}?{urlencode(query)}"


def _changes_delta(suggestion: monitoring.Suggestion) -> bool:
    """Whether the suggestion is a change: a δ other than the version's own."""
    best, current = suggestion.best, suggestion.current
    return best is not None and current is not None and abs(best.delta - current.delta) > 1e-9


@manage_policy
@require_GET
def policy_monitoring_page(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    days = monitoring.decision_days(now=now)
    live = monitoring.traffic(days, now=now)
    capacity = settings.GUARDIAN_REVIEWER_CAPACITY_PER_HOUR
    active = PolicyVersion.objects.filter(is_active=True).first()
    pairs = monitoring.reviewer_pairs()
    conditions, suggestions = [], []
    for condition in Condition:
        c = condition.value
        threshold = monitoring.t_star(active, c)
        costs = (active.thresholds or {}).get(c) if active else None
        rows = monitoring.reviewer_rows(c)
        suggestion = monitoring.suggest_thresholds(
            c,
            monitoring.human_examples(rows),
            costs=costs,
            live=live,
            capacity_per_hour=capacity,
        )
        suggestions.append(suggestion)
        paired = [p for p in pairs if condition == Condition.RISK]
        conditions.append(
            {
                "name": c,
                "chart": _heatmap(days, c),
                "psi": monitoring.shift(days, c),
                "t_star": threshold,
                "delta": costs.get("delta") if costs else None,
                "c_stop": costs.get("c_stop") if costs else None,
                "rows_capped": len(rows) >= monitoring.REVIEWER_ROWS,
                "agreement": (
                    monitoring.guardian_vs_reviewers(rows, threshold)
                    if threshold is not None
                    else None
                ),
                "judge_agreement": (
                    monitoring.judge_vs_reviewers(rows, threshold)
                    if threshold is not None
                    else None
                ),
                "suggestion": suggestion,
                "draft_url": (
                    draft_url(active, [suggestion])
                    if active is not None and _changes_delta(suggestion)
                    else None
                ),
                "reviewers": (
                    {
                        "agreement": monitoring.reviewer_vs_reviewer(paired),
                        "both_given": sum(p.first_given and p.second_given for p in paired),
                        "rejected": sum(p.second_decision == "reject" for p in paired),
                    }
                    if condition == Condition.RISK
                    else None
                ),
            }
        )
    offered = [s for s in suggestions if _changes_delta(s)]
    # What the draft with every suggestion would send reviewers: the suggested band where it
    # changes one, the current one elsewhere. The sum bounds the union (a turn two conditions
    # escalate counts once); unknown when a condition had no recent probabilities.
    loads = [
        (s.best if _changes_delta(s) else s.current).per_hour
        for s in suggestions
        if s.current is not None
    ]
    offered_per_hour = sum(loads) if offered and None not in loads else None
    # Each suggestion is held within capacity alone; together they may not be.
    together_fits = offered_per_hour is None or offered_per_hour <= capacity
    banners = monitoring.banners(days, now=now)
    return render(
        request,
        "policies/policy_monitoring.html",
        {
            "days": days,
            "escalations": _escalation_bars(days),
            "banners": banners,
            # Whether the top says the last day is above capacity: the suggestions, which
            # price one condition's band over the window, say how that differs.
            # The capacity banner names its setting in every language.
            "over_capacity": any("GUARDIAN_REVIEWER_CAPACITY_PER_HOUR" in b for b in banners),
            "capacity": capacity,
            "psi_threshold": monitoring.PSI_THRESHOLD,
            "active": active,
            "conditions": conditions,
            "traffic": live,
            "folded_at": monitoring.monitoring_folded_at(),
            "settle_seconds": settings.GUARDIAN_MONITORING_SETTLE_SECONDS,
            "reviewer_rows_cap": monitoring.REVIEWER_ROWS,
            "review_share": settings.GUARDIAN_REVIEW_COST_SHARE,
            "min_labels": monitoring.MIN_LABELS,
            "min_per_class": monitoring.MIN_PER_CLASS,
            "draft_all_url": (
                draft_url(active, offered)
                if active is not None and len(offered) > 1 and together_fits
                else None
            ),
            "correlated": monitoring.correlated_figures(days),
            "runs_ended": sum(day.runs for day in days),
            "correlated_min_turns": correlated_errors.MIN_TURNS,
            "correlated_min_runs": correlated_errors.MIN_RUNS,
            "offered_count": len(offered),
            "offered_per_hour": offered_per_hour,
            "together_fits": together_fits,
        },
    )
