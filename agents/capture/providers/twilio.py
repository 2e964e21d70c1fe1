"""Being written in this change."""

urlpatterns: list = []
