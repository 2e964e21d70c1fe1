"""Outbound webhooks for agencies: the delivery of the outbox's events to
each business's subscriptions (`delivery`), over a guarded HTTP post
(`transport`). The records and what a person does to them are crm's
(crm.services.webhooks, crm.services.outbox)."""
