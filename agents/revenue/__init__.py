"""Revenue ops: jobs, invoices, payments and refunds as separate records and
separate events, and Payment Matching (which lead, job and invoice a payment
pays for). Stripe's webhook parser lives with the other providers in
`agents/capture/providers/stripe.py`; the revenue report is a read, in
`crm/attribution.py`."""
