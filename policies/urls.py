"""The admins' room's pages, under /policies/: policy versions and their editor, diff and
activation (the regression gate), evaluation, monitoring, guardian model versions and jobs,
shadow trials."""

from django.urls import path

from policies import (
    evaluation_views,
    guardian_model_views,
    monitoring_views,
    policy_diff_views,
    policy_gate_views,
    shadow_views,
    views,
)

app_name = "policies"
urlpatterns = [
    path("", views.policy_version_list_page, name="list"),
    path("new/", views.policy_version_new_page, name="new"),
    path("new/preview", views.policy_version_preview, name="preview"),
    path("evaluate/", evaluation_views.policy_evaluate_page, name="evaluate"),
    path("monitoring/", monitoring_views.policy_monitoring_page, name="monitoring"),
    path("<int:version_id>/", views.policy_version_detail_page, name="detail"),
    path(
        "<int:version_id>/activate",
        policy_gate_views.policy_version_activate_page,
        name="activate",
    ),
    path("<int:version_id>/diff/", policy_diff_views.policy_version_diff_page, name="diff"),
    path("models/", guardian_model_views.guardian_model_list_page, name="models"),
    path("models/jobs", guardian_model_views.guardian_model_jobs, name="model_jobs"),
    path(
        "models/versions",
        guardian_model_views.guardian_model_versions,
        name="model_versions",
    ),
    path(
        "models/<int:version_id>/",
        guardian_model_views.guardian_model_detail_page,
        name="model_detail",
    ),
    path(
        "models/<int:version_id>/activate",
        guardian_model_views.guardian_model_activate_page,
        name="model_activate",
    ),
    path(
        "models/<int:version_id>/retire",
        guardian_model_views.guardian_model_retire,
        name="model_retire",
    ),
    path("shadow/", shadow_views.shadow_trial_list_page, name="shadow"),
    path("shadow/<int:trial_id>/", shadow_views.shadow_trial_detail_page, name="shadow_detail"),
    path("shadow/<int:trial_id>/stop", shadow_views.shadow_trial_stop_view, name="shadow_stop"),
]
