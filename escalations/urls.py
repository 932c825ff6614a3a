"""The reviewers' pages, under /escalations/: the queue, one escalation and its decision, the
labelled examples and their download."""

from django.urls import path

from escalations import views

app_name = "escalations"
urlpatterns = [
    path("", views.escalation_queue_page, name="queue"),
    path("next", views.escalation_next, name="next"),
    path("bulk", views.escalation_bulk, name="bulk"),
    path("<int:escalation_id>/", views.escalation_detail_page, name="detail"),
    path("<int:escalation_id>/decide", views.escalation_decide, name="decide"),
    path("<int:escalation_id>/skip", views.escalation_skip, name="skip"),
    path("<int:escalation_id>/extend", views.escalation_extend, name="extend"),
    path("examples/", views.labelled_examples_page, name="examples"),
    path("examples.jsonl", views.labelled_examples_download, name="examples_jsonl"),
]
