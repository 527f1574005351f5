from django.apps import AppConfig


class ExecutionConfig(AppConfig):
    """The control plane's side of real execution: node agents fetch their assignments,
    report how the runs go, and ship their output."""

    name = "execution"
    verbose_name = "Execution"
