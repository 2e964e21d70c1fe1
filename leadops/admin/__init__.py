"""The admin pages that combine apps: what crm's and approvals' admins
cannot hold because they call agents' roles (replaying an event, recording
a payment), plus the API tokens'. Django's autodiscovery imports this
package after crm's and approvals' admins (INSTALLED_APPS order)."""

from leadops.admin import conversions, events, revenue, tokens  # noqa: F401 - each registers its admin classes
