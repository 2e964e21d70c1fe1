"""The `simulate` client: realistic, correctly signed webhooks for a
business's sources, posted to a running server over HTTP (core: people,
builders, plans and the run; bookings, estimates, payments: the phases that
follow up on the leads a run opened)."""
