"""Revenue ops and reporting: pipeline QA, call scoring, the daily
owner brief, Slack alerts, the funnel, the lead trace and the leak audit.

Each module is one role: plain functions over the crm records, read in sets
(a fixed number of queries however many leads), with the pages in
`leadops/reports.py` and the task wrappers in `agents/tasks.py`.
"""
