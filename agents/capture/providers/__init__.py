"""One module per source. Importing this package registers every provider's
processing handler (done at startup by AgentsConfig.ready, so the task
cluster, which never loads the URLs, knows them too)."""

from agents.capture.providers import (
    angi,
    calendly,
    callrail,
    google_ads,
    google_lsa,
    meta,
    stripe,
    thumbtack,
    twilio,
    typeform,
    website,
    yelp,
)

PROVIDER_MODULES = (
    website,
    google_ads,
    meta,
    typeform,
    twilio,
    stripe,
    calendly,
    angi,
    callrail,
    thumbtack,
    google_lsa,
    yelp,
)
