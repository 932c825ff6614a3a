"""The API's policy version endpoints, named in the `api` namespace (guardian_core/urls.py
includes them there)."""

from django.urls import path

from guardian_core.api import api_view
from policies.api import PolicyVersionActivateApi, PolicyVersionCreateApi, PolicyVersionListApi

urlpatterns = [
    path("policy-versions/", api_view(PolicyVersionListApi), name="policy-version-list"),
    path("policy-versions/create/", api_view(PolicyVersionCreateApi), name="policy-version-create"),
    path(
        "policy-versions/<int:pk>/activate/",
        api_view(PolicyVersionActivateApi),
        name="policy-version-activate",
    ),
]
