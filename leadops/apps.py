from django.apps import AppConfig


class LeadopsConfig(AppConfig):
    name = "leadops"
    default_auto_field = "django.db.models.BigAutoField"
