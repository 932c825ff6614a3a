"""The API's escalation and labelled example endpoints, named in the `api` namespace
(guardian_core/urls.py includes them there)."""

from django.urls import path

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
from guardian_core.api import api_view

urlpatterns = [
    path("escalations/", api_view(EscalationOpenListApi), name="escalation-list"),
    path("escalations/<int:pk>/", api_view(EscalationDetailApi), name="escalation-detail"),
    path("escalations/<int:pk>/claim/", api_view(EscalationClaimApi), name="escalation-claim"),
    path(
        "escalations/<int:pk>/release/", api_view(EscalationReleaseApi), name="escalation-release"
    ),
    path(
        "escalations/<int:pk>/resolve/", api_view(EscalationResolveApi), name="escalation-resolve"
    ),
    path("escalations/<int:pk>/extend/", api_view(EscalationExtendApi), name="escalation-extend"),
    path("examples/", api_view(LabelledExampleListApi), name="example-list"),
    path("examples/export/", api_view(LabelledExampleExportApi), name="example-export"),
]
