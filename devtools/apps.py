from django.apps import AppConfig


class DevtoolsConfig(AppConfig):
    """Tooling around the product, never part of it: the `simulate` client,
    the demo business and its `load_demo` command. The product's apps never
    import this one (an import-linter contract holds it)."""

    name = "devtools"
    default_auto_field = "django.db.models.BigAutoField"
