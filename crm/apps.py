from django.apps import AppConfig


class CrmConfig(AppConfig):
    name = "crm"
    verbose_name = "CRM"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from crm.roles import roles_sync_on_migrate

        post_migrate.connect(roles_sync_on_migrate, dispatch_uid="crm.roles_sync")
        from crm.services import webhooks

        webhooks.register()  # outbound webhook deliveries: a consumer of the outbox
        from crm.services import conversions

        conversions.register()  # conversion uploads to the ad platforms: another
