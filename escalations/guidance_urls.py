"""The reviewers' guidance pages, under /guidance/: the rubric reviewers read beside a
decision, written by admins."""

from django.urls import path

from escalations import views

app_name = "guidance"
urlpatterns = [
    path("", views.review_guidance_page, name="list"),
    path("<int:guidance_id>/", views.review_guidance_edit_page, name="edit"),
    path("<int:guidance_id>/delete", views.review_guidance_delete_view, name="delete"),
]
