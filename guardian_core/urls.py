"""The root URL map. Pages need a login (LoginRequiredMiddleware); the API answers 403 instead.

Each room's URLs are its own module, included here by name: the floor imports no room."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required, login_required
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.utils.functional import lazy
from django.views.generic import RedirectView
from django.views.i18n import JavaScriptCatalog
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from guardian_core import preferences, views
from guardian_core.api import ApiIndexApi, ApiNotFoundApi, api_view

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
    # Each room names its own endpoints; they share the `api` namespace.
    path("", include("runs.api_urls")),
    path("", include("escalations.api_urls")),
    path("", include("policies.api_urls")),
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
    # Metrics (issue 26): the Prometheus scrape, a 404 unless enabled (docs/OPERATIONS.md).
    path("metrics", include("policies.metrics_urls")),
    # Pages name their icon (base.html); a browser still asks here for the admin's pages.
    path(
        "favicon.ico",
        login_not_required(RedirectView.as_view(url=lazy(static, str)("favicon.svg"))),
        name="favicon",
    ),
    # The words the pages' scripts write themselves (static/js/*.js: gettext, ngettext,
    # interpolate), from locale/*/LC_MESSAGES/djangojs.po, in the person's language. Open to
    # all: the login page loads it too. Only Guardian's own catalogue (not the admin's).
    path(
        "jsi18n/",
        login_not_required(JavaScriptCatalog.as_view(packages=["guardian_core"])),
        name="javascript-catalog",
    ),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password/", views.PasswordChange.as_view(), name="password_change"),
    path("accounts/preferences/", preferences.preferences_page, name="preferences"),
    path("language", preferences.language_switch_view, name="language"),
    path("escalations/", include("escalations.urls")),
    path("runs/", include("runs.urls")),
    path("policies/", include("policies.urls")),
    path("tokens/", include(token_patterns)),
    path("guidance/", include("escalations.guidance_urls")),
    path("people/", include(people_patterns)),
    path("api/", include((api_patterns, "api"))),
    path("admin/", admin.site.urls),
]
