"""The read API under `/api/v1/` (its OpenAPI schema: /api/schema/), one module per group of records.

Every record is addressed by its public id and every reference to a record
is that record's public id; users appear as usernames. What a user may see
comes from `crm.selectors`; list filters from `crm.api.filters`. Querysets
load everything a page renders up front, so a list costs the same number of
queries for 2 rows as for 50.

- `common`: the read viewset every list and detail shares, the error shape,
  the schema helpers and the public-id field.
- `leads`: leads, their source touches and audit trail (receipts), contacts
  and their consent.
- `conversations`: messages in and out, people's tasks, follow-up enrollments.
- `events`: raw provider deliveries.
- `money`: appointments, estimates, jobs, invoices, payments, refunds.
- `revenue`: the revenue report.
- `filters`: the read helpers behind the list filters; `urls`: the routes.
"""
