from django.urls import URLPattern, path

from monitoring import views

urlpatterns: list[URLPattern] = [path("", views.metrics, name="metrics")]
