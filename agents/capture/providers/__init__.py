"""One module per source. Importing this package registers every provider's
processing handler (done at startup by AgentsConfig.ready, so the task
cluster, which never loads the URLs, knows them too)."""

from agents.capture.providers import calendly, google_ads, meta, stripe, twilio, typeform, website

PROVIDER_MODULES = (website, google_ads, meta, typeform, twilio, stripe, calendly)
