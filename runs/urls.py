"""The auditors' pages, under /runs/: the runs list, a run and its exports and chain check,
replay and the probe of a turn."""

from django.urls import path

from runs import audit_views, replay_views, views

app_name = "runs"
urlpatterns = [
    path("", views.run_list_page, name="list"),
    path("decisions.csv", audit_views.decision_log_csv, name="decision_log_csv"),
    path("<int:run_id>/", views.run_detail_page, name="detail"),
    path("<int:run_id>/verify/", audit_views.run_verify, name="verify"),
    path("<int:run_id>/export.json", audit_views.run_export_json, name="export_json"),
    path("<int:run_id>/decisions.csv", audit_views.run_export_csv, name="export_csv"),
    path("<int:run_id>/replay/", replay_views.run_replay_page, name="replay"),
    path(
        "<int:run_id>/turns/<int:index>/replay/",
        replay_views.turn_replay_page,
        name="turn_replay",
    ),
    path("<int:run_id>/turns/<int:index>/probe/", replay_views.turn_probe_page, name="turn_probe"),
]
