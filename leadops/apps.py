from django.apps import AppConfig


class LeadopsConfig(AppConfig):
    name = "leadops"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib import admin

        # The product's name on every page; our own pages read these too
        # (leadops.context_processors).
        admin.site.site_header = "LeadOps"
        admin.site.site_title = "LeadOps"
        admin.site.index_title = "LeadOps back office"
