from django.apps import AppConfig


class LeadopsConfig(AppConfig):
    name = "leadops"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib import admin

        admin.site.site_header = "LeadOps back office"
        admin.site.site_title = "LeadOps"
        admin.site.index_title = "Leads, people, money and receipts"
