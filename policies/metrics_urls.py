"""The scrape's URL, included at /metrics by the root URL map."""

from django.urls import path

from policies.metrics_views import metrics_view

urlpatterns = [path("", metrics_view, name="metrics")]
