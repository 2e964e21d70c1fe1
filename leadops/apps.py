from django.apps import AppConfig


class LeadopsConfig(AppConfig):
    name = "leadops"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The product's name on every page is the admin site's
        # (leadops.admin_site); our own pages read it too (leadops.context_processors).
        from django.contrib.auth.signals import user_logged_in

        from leadops.middleware import session_seen_at_login

        # A new session starts seen: its first request need not write it again.
        user_logged_in.connect(session_seen_at_login, dispatch_uid="leadops.session_seen_at_login")
        from leadops.two_factor import two_factor_at_login

        user_logged_in.connect(two_factor_at_login, dispatch_uid="leadops.two_factor_at_login")
