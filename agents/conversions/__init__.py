"""Conversions to the ad platforms: each moment of a lead that a business
maps (qualified, booked, appointment held, won, paid) uploaded once to
Google Ads (`google.py`, the official `google-ads` client; `data_manager.py`,
Google's Data Manager API, for accounts new to uploading) and Meta's
Conversions API for CRM (`meta.py`), claimed, retried and recorded by
`delivery.py`. The uploads themselves are records: crm.services.conversions."""
