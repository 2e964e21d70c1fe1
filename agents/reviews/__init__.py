"""Reviews: asking for one after the job, reading what customers wrote, and
answering it once a person approved the reply.

- `requests`: the review request after a paid (or completed) job, its stop
  rules, the counted redirect link and the figures per business.
- `google_business`: the Google Business Profile connection (a sync adapter,
  connected at /admin/sync/) and its accounts, locations, reviews and reply APIs.
- `pull`: the location's reviews read on a schedule, kept once each, and
  matched by name to the customer who was sent a request.
- `replies`: a reply drafted from the playbook, checked by the claims guard,
  approved by a second person, then posted to Google.
"""
