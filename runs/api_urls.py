"""The API's run endpoints, named in the `api` namespace (guardian_core/urls.py includes
them there): runs, their turns and exports, and an external run's steps."""

from django.urls import path

from guardian_core.api import api_view
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
from runs.external_api import (
    EscalationWaitApi,
    RunStepApi,
    run_step_results_view,
    run_steps_view,
)

urlpatterns = [
    path("runs/", api_view(RunListApi), name="run-list"),
    path("runs/<int:pk>/", api_view(RunDetailApi), name="run-detail"),
    path("runs/start/", api_view(RunCreateApi), name="run-start"),
    path("runs/<int:pk>/cancel/", api_view(RunCancelApi), name="run-cancel"),
    # The two calls an outside loop makes at every step: their common request on a lean path.
    path("runs/<int:pk>/steps/", run_steps_view(), name="run-steps"),
    path("runs/<int:pk>/steps/<int:step>/", api_view(RunStepApi), name="run-step"),
    path(
        "runs/<int:pk>/steps/<int:step>/results/",
        run_step_results_view(),
        name="run-step-results",
    ),
    path("runs/<int:pk>/turns/", api_view(RunTurnListApi), name="run-turn-list"),
    path("runs/<int:pk>/turns/<int:index>/", api_view(RunTurnDetailApi), name="run-turn-detail"),
    path("runs/<int:pk>/export/", api_view(RunExportApi), name="run-export"),
    path("runs/<int:pk>/decisions.csv", api_view(RunDecisionCsvApi), name="run-decisions-csv"),
    path("decisions.csv", api_view(DecisionLogCsvApi), name="decision-log-csv"),
    path("escalations/<int:pk>/wait", api_view(EscalationWaitApi), name="escalation-wait"),
]
