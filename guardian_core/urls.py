"""URL map. Pages need a login (LoginRequiredMiddleware); the API answers 403 instead."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.templatetags.static import static
from django.urls import include, path
from django.utils.functional import lazy
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView

from escalations.api import EscalationOpenListApi
from guardian_core import views
from guardian_core.api import PolicyVersionListApi
from runs.api import RunCancelApi, RunCreateApi, RunDetailApi, RunListApi


def api_view(view_class):
    # API clients get 403 JSON from DRF rather than a redirect to the HTML login page.
    return login_not_required(view_class.as_view())


policy_patterns = (
    [path("", views.policy_version_list_page, name="list")],
    "policies",
)

api_patterns = [
    path("schema/", login_not_required(SpectacularAPIView.as_view()), name="schema"),
    path("runs/", api_view(RunListApi), name="run-list"),
    path("runs/<int:pk>/", api_view(RunDetailApi), name="run-detail"),
    path("runs/start/", api_view(RunCreateApi), name="run-start"),
    path("runs/<int:pk>/cancel/", api_view(RunCancelApi), name="run-cancel"),
    path("escalations/", api_view(EscalationOpenListApi), name="escalation-list"),
    path("policy-versions/", api_view(PolicyVersionListApi), name="policy-version-list"),
]

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
    path("escalations/", include("escalations.urls")),
    path("runs/", include("runs.urls")),
    path("policies/", include(policy_patterns)),
    path("api/", include((api_patterns, "api"))),
    path("admin/", admin.site.urls),
]
