"""The admins' monitoring page: probabilities and escalations per day, shift, agreement,
and suggested thresholds offered as an editable draft."""

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_GET

from guardian_core import monitoring
from guardian_core.engine.conditions import Condition
from guardian_core.forms import threshold_field
from guardian_core.models import PolicyVersion
from guardian_core.views import manage_policy

# SVG geometry (viewBox units): one column per day, one row per probability bin.
CELL_W, CELL_H, LEFT, TOP = 22, 14, 34, 6


def _heatmap(days: list[monitoring.Day], condition: str) -> dict:
    cells = []
    for column, day in enumerate(days):
        counts = day.counts.get(condition, [0] * monitoring.BINS)
        total = sum(counts)
        for b, n in enumerate(counts):
            if not n:
                continue
            share = n / total
            cells.append(
                {
                    "x": LEFT + column * CELL_W,
                    "y": TOP + (monitoring.BINS - 1 - b) * CELL_H,
                    "opacity": round(0.15 + 0.85 * share, 3),
                    "title": f"{day.day}: {n} of {total} in {b / 10:.1f}–{(b + 1) / 10:.1f}",
                }
            )
    return {
        "cells": cells,
        "width": LEFT + len(days) * CELL_W + 4,
        "height": TOP + monitoring.BINS * CELL_H + 18,
        "cell_w": CELL_W - 2,
        "cell_h": CELL_H - 2,
        "bottom": TOP + monitoring.BINS * CELL_H,
        "label_y": TOP + monitoring.BINS * CELL_H + 14,
        "y_ticks": [
            (TOP + (monitoring.BINS - i) * CELL_H + 4, f"{i / 10:.1f}") for i in (0, 5, 10)
        ],
        "x_ticks": [
            (LEFT + c * CELL_W + CELL_W / 2, day.day.strftime("%d")) for c, day in enumerate(days)
        ],
    }


def _escalation_bars(days: list[monitoring.Day]) -> dict:
    height = 100
    bars = []
    for column, day in enumerate(days):
        rate = day.escalation_rate
        h = round((rate or 0) * height, 2)
        bars.append(
            {
                "x": LEFT + column * CELL_W,
                "y": TOP + height - h,
                "height": h,
                "title": f"{day.day}: {day.escalations} escalations of {day.decisions} decisions",
            }
        )
    return {
        "bars": bars,
        "width": LEFT + len(days) * CELL_W + 4,
        "height": TOP + height + 18,
        "bar_w": CELL_W - 2,
        "bottom": TOP + height,
        "label_y": TOP + height + 14,
        "x_ticks": [
            (LEFT + c * CELL_W + CELL_W / 2, day.day.strftime("%d")) for c, day in enumerate(days)
        ],
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
    return render(
        request,
        "guardian_core/policy_monitoring.html",
        {
            "days": days,
            "escalations": _escalation_bars(days),
            "banners": monitoring.banners(days, now=now),
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
            "offered_count": len(offered),
            "offered_per_hour": offered_per_hour,
            "together_fits": together_fits,
        },
    )
