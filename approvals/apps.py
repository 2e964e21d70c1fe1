from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from approvals import kinds
        from approvals.forget import approvals_forget
        from crm.services.forget import forget_eraser_register

        kinds.register()  # what a decision may edit, per kind
        forget_eraser_register("approvals", approvals_forget)
