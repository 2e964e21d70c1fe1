"""The approved playbook: versioned message templates, the claims guard, and
the AI SMS Assistant that drafts from them.

- `templates`: rendering (`template_render`), the automation read
  (`template_for_automation`) and the two-party change of text
  (`template_revise`, then `template_approve` by a person).
- `claims_guard`: `claims_scan(text)` finds prices, discounts, warranties,
  arrival times and diagnoses of licensed work.
- `assistant`: `draft_acknowledgement`, `draft_reply`, `draft_check`; the
  drafting step behind the `Drafter` protocol, rules-based by default.
"""
