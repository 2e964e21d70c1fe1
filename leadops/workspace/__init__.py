"""The setters' workspace (`/app/`): the inbox across leads and one thread
per lead, live without reloads, usable at a phone's width, times in the
viewer's zone. Pages of ours, not admin changelists; every form works
without JavaScript, and htmx (vendored under static/vendor/htmx) only
enhances them."""
