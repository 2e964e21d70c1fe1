from django.apps import AppConfig


class WorkspaceConfig(AppConfig):
    # An app of its own only so that its template tags are found.
    name = "leadops.workspace"
    label = "workspace"
    verbose_name = "Setters' workspace"
