from django.urls import path

from escalations import views

app_name = "escalations"
urlpatterns = [
    path("", views.escalation_queue_page, name="queue"),
]
