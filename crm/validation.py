"""The rules a business's settings obey wherever they are typed: in the
business file (crm.services.business_file) or in the admin's forms. Both
end in the models' `clean()` (the loader runs `full_clean` on every row it
writes; a ModelForm does too), which call these; the business file's parser
calls them again only to name the line. Pure functions: no database.
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import urlsplit

# Characters that change how text is shown without showing themselves: a
# right-to-left override makes "Acme" read backwards in a customer's text,
# a zero-width space makes two names look alike. Names go into texts.
_INVISIBLE = {
    "\u200b": "a zero-width space",
    "\u200c": "a zero-width non-joiner",
    "\u200d": "a zero-width joiner",
    "\u2060": "a word joiner",
    "\ufeff": "a zero-width no-break space",
    "\u200e": "a left-to-right mark",
    "\u200f": "a right-to-left mark",
    "\u061c": "an Arabic letter mark",
    **{chr(c): "a bidirectional override" for c in range(0x202A, 0x202F)},
    **{chr(c): "a bidirectional isolate" for c in range(0x2066, 0x206A)},
}

_HOST = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*$")
# A developer's own machine may frame the form over plain http.
_LOCAL_HOSTS = ("localhost", "127.0.0.1")


def name_refusal(value: str) -> str | None:
    """Why `value` may not be a name shown to customers (None: it may)."""
    for char in value:
        if char in _INVISIBLE:
            return f"contains {_INVISIBLE[char]} (U+{ord(char):04X}), which changes how the text reads"
        if unicodedata.category(char) == "Cc":
            return f"contains a control character (U+{ord(char):04X})"
    return None


def origin_refusal(value: str) -> str | None:
    """Why `value` is not one exact web origin (None: it is):
    https://host[:port], nothing after it, no wildcard; plain http for
    localhost alone."""
    parts = urlsplit(value)
    host = parts.hostname or ""
    if "*" in value:
        return "a wildcard would let any matching site frame the form: name each site"
    if parts.scheme != "https" and not (parts.scheme == "http" and host in _LOCAL_HOSTS):
        return "must be https:// (http only for localhost)"
    if parts.username or parts.password or parts.path not in ("", "/") or parts.query or parts.fragment:
        return "must be an origin alone, like https://acme.example (no path, query or user)"
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        return "has a bad port"
    if not _HOST.match(host):
        return "names no valid host"
    return None
