"""URL map. Pages need a login (LoginRequiredMiddleware); the API answers 403 instead."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required, login_required
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.utils.functional import lazy
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from escalations import views as escalation_views
from escalations.api import (
    EscalationClaimApi,
    EscalationDetailApi,
    EscalationExtendApi,
    EscalationOpenListApi,
    EscalationReleaseApi,
    EscalationResolveApi,
    LabelledExampleExportApi,
    LabelledExampleListApi,
)
from guardian_core import (
    evaluation_views,
    guardian_model_views,
    monitoring_views,
    policy_diff_views,
    policy_gate_views,
    shadow_views,
    views,
)
from guardian_core.api import (
    ApiIndexApi,
    ApiNotFoundApi,
    PolicyVersionActivateApi,
    PolicyVersionCreateApi,
    PolicyVersionListApi,
)
from runs.api import (
    DecisionLogCsvApi,
    RunCancelApi,
    RunCreateApi,
    RunDecisionCsvApi,
    RunDetailApi,
    RunExportApi,
    RunListApi,
    RunTurnDetailApi,
    RunTurnListApi,
)
from runs.external_api import EscalationWaitApi, RunStepApi, RunStepResultsApi, RunStepsApi


def api_view(view_class):
    # API clients get 403 JSON from DRF rather than a redirect to the HTML login page.
    return login_not_required(view_class.as_view())


policy_patterns = (
    [
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
    ],
    "policies",
)
guidance_patterns = (
    [
        path("", escalation_views.review_guidance_page, name="list"),
        path("<int:guidance_id>/", escalation_views.review_guidance_edit_page, name="edit"),
        path(
            "<int:guidance_id>/delete", escalation_views.review_guidance_delete_view, name="delete"
        ),
    ],
    "guidance",
)
people_patterns = (
    [
        path("", views.people_page, name="list"),
        path("<int:user_id>/roles", views.person_roles_view, name="roles"),
        path("<int:user_id>/active", views.person_active_view, name="active"),
        path("<int:user_id>/password", views.person_password_view, name="password"),
    ],
    "people",
)
token_patterns = (
    [
        path("", views.api_token_list_page, name="list"),
        path("<int:token_id>/revoke", views.api_token_revoke_view, name="revoke"),
    ],
    "tokens",
)

api_patterns = [
    path("", api_view(ApiIndexApi), name="index"),
    path("schema/", login_not_required(SpectacularAPIView.as_view()), name="schema"),
    # A page for people: signing in is a redirect to the login page, as for every page (DRF
    # marks its views login_not_required, hence the explicit decorator). Its
    # init script is served by the same view (?script), so no inline script meets the CSP.
    path(
        "docs/",
        login_required(
            SpectacularSwaggerSplitView.as_view(
                url_name="api:schema", template_name="guardian_core/api_docs.html"
            )
        ),
        name="docs",
    ),
    path("runs/", api_view(RunListApi), name="run-list"),
    path("runs/<int:pk>/", api_view(RunDetailApi), name="run-detail"),
    path("runs/start/", api_view(RunCreateApi), name="run-start"),
    path("runs/<int:pk>/cancel/", api_view(RunCancelApi), name="run-cancel"),
    path("runs/<int:pk>/steps/", api_view(RunStepsApi), name="run-steps"),
    path("runs/<int:pk>/steps/<int:step>/", api_view(RunStepApi), name="run-step"),
    path(
        "runs/<int:pk>/steps/<int:step>/results/",
        api_view(RunStepResultsApi),
        name="run-step-results",
    ),
    path("runs/<int:pk>/turns/", api_view(RunTurnListApi), name="run-turn-list"),
    path("runs/<int:pk>/turns/<int:index>/", api_view(RunTurnDetailApi), name="run-turn-detail"),
    path("runs/<int:pk>/export/", api_view(RunExportApi), name="run-export"),
    path("runs/<int:pk>/decisions.csv", api_view(RunDecisionCsvApi), name="run-decisions-csv"),
    path("decisions.csv", api_view(DecisionLogCsvApi), name="decision-log-csv"),
    path("escalations/", api_view(EscalationOpenListApi), name="escalation-list"),
    path("escalations/<int:pk>/", api_view(EscalationDetailApi), name="escalation-detail"),
    path("escalations/<int:pk>/claim/", api_view(EscalationClaimApi), name="escalation-claim"),
    path("escalations/<int:pk>/wait", api_view(EscalationWaitApi), name="escalation-wait"),
    path(
        "escalations/<int:pk>/release/", api_view(EscalationReleaseApi), name="escalation-release"
    ),
    path(
        "escalations/<int:pk>/resolve/", api_view(EscalationResolveApi), name="escalation-resolve"
    ),
    path("escalations/<int:pk>/extend/", api_view(EscalationExtendApi), name="escalation-extend"),
    path("examples/", api_view(LabelledExampleListApi), name="example-list"),
    path("examples/export/", api_view(LabelledExampleExportApi), name="example-export"),
    path("policy-versions/", api_view(PolicyVersionListApi), name="policy-version-list"),
    path("policy-versions/create/", api_view(PolicyVersionCreateApi), name="policy-version-create"),
    path(
        "policy-versions/<int:pk>/activate/",
        api_view(PolicyVersionActivateApi),
        name="policy-version-activate",
    ),
    # Last: any other path under /api/ is a JSON 404 in the API's error shape (a path may
    # hold a newline, which "." would not match).
    re_path(r"^(?P<rest>[\s\S]+)\Z", api_view(ApiNotFoundApi), name="not-found"),
]

# Under /api/ Django's own 400 and 500 answers are JSON in the API's error shape (a database
# that does not answer is a 503); the pages keep their HTML pages.
handler400 = "guardian_core.api.bad_request"
handler500 = "guardian_core.api.server_error"

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    # Pages name their icon (base.html); a browser still asks here for the admin's pages.
    path(
        "favicon.ico",
        login_not_required(RedirectView.as_view(url=lazy(static, str)("favicon.svg"))),
        name="favicon",
    ),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password/", views.PasswordChange.as_view(), name="password_change"),
    path("escalations/", include("escalations.urls")),
    path("runs/", include("runs.urls")),
    path("policies/", include(policy_patterns)),
    path("tokens/", include(token_patterns)),
    path("guidance/", include(guidance_patterns)),
    path("people/", include(people_patterns)),
    path("api/", include((api_patterns, "api"))),
    path("admin/", admin.site.urls),
]
