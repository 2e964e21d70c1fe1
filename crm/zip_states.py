"""A US ZIP code's state, by its first three digits.

USPS assigns each three-digit ZIP prefix (a sectional center) to one state, so
the prefix is enough to know the state a person gave as their address; no
street-level data is needed, and no dependency. Ranges are inclusive; the few
prefixes that break a state's run (055 in Vermont's run is Massachusetts', 733
and 885 are Texas') are listed before the runs. Military (AA, AE, AP) and
territory prefixes map to no state.
"""

from __future__ import annotations

import re

_EXCEPTIONS = {"055": "MA", "201": "VA", "569": "DC", "733": "TX", "885": "TX"}

_RANGES: tuple[tuple[int, int, str], ...] = (
    (5, 5, "NY"),
    (10, 27, "MA"),
    (28, 29, "RI"),
    (30, 38, "NH"),
    (39, 49, "ME"),
    (50, 59, "VT"),
    (60, 69, "CT"),
    (70, 89, "NJ"),
    (100, 149, "NY"),
    (150, 196, "PA"),
    (197, 199, "DE"),
    (200, 205, "DC"),
    (206, 219, "MD"),
    (220, 246, "VA"),
    (247, 268, "WV"),
    (270, 289, "NC"),
    (290, 299, "SC"),
    (300, 319, "GA"),
    (320, 339, "FL"),
    (341, 349, "FL"),
    (350, 369, "AL"),
    (370, 385, "TN"),
    (386, 397, "MS"),
    (398, 399, "GA"),
    (400, 427, "KY"),
    (430, 459, "OH"),
    (460, 479, "IN"),
    (480, 499, "MI"),
    (500, 528, "IA"),
    (530, 549, "WI"),
    (550, 567, "MN"),
    (570, 577, "SD"),
    (580, 588, "ND"),
    (590, 599, "MT"),
    (600, 629, "IL"),
    (630, 658, "MO"),
    (660, 679, "KS"),
    (680, 693, "NE"),
    (700, 715, "LA"),
    (716, 729, "AR"),
    (730, 749, "OK"),
    (750, 799, "TX"),
    (800, 816, "CO"),
    (820, 831, "WY"),
    (832, 838, "ID"),
    (840, 847, "UT"),
    (850, 865, "AZ"),
    (870, 884, "NM"),
    (889, 898, "NV"),
    (900, 961, "CA"),
    (967, 968, "HI"),
    (970, 979, "OR"),
    (980, 994, "WA"),
    (995, 999, "AK"),
)

_ZIP = re.compile(r"^\s*(\d{5})(?:-?\d{4})?\s*$")


def zip_state(postal_code: str) -> str:
    """The two-letter state of a US ZIP code ("33101" → "FL"), or "" when it
    is not a ZIP code or its prefix belongs to no state."""
    match = _ZIP.match(postal_code or "")
    if not match:
        return ""
    prefix = match.group(1)[:3]
    if prefix in _EXCEPTIONS:
        return _EXCEPTIONS[prefix]
    number = int(prefix)
    return next((state for low, high, state in _RANGES if low <= number <= high), "")


_EASTERN, _CENTRAL, _MOUNTAIN, _PACIFIC = "America/New_York", "America/Chicago", "America/Denver", "America/Los_Angeles"

# Every zone some of a state's people live in: where the address tells the
# state but not the place, a rule is kept in each of them (the stricter).
STATE_ZONES: dict[str, tuple[str, ...]] = {
    **{s: (_EASTERN,) for s in ["CT", "DE", "DC", "GA", "ME", "MD", "MA", "NH", "NJ", "NY", "NC", "OH", "PA"]},
    **{s: (_EASTERN,) for s in ["RI", "SC", "VT", "VA", "WV"]},
    **{s: (_EASTERN, _CENTRAL) for s in ["FL", "IN", "KY", "MI", "TN"]},
    **{s: (_CENTRAL,) for s in ["AL", "AR", "IL", "IA", "LA", "MN", "MS", "MO", "OK", "WI"]},
    **{s: (_CENTRAL, _MOUNTAIN) for s in ["KS", "NE", "ND", "SD", "TX"]},
    **{s: (_MOUNTAIN,) for s in ["CO", "MT", "NM", "UT", "WY"]},
    "AZ": ("America/Phoenix",),
    "ID": (_MOUNTAIN, _PACIFIC),
    "OR": (_PACIFIC, _MOUNTAIN),
    "NV": (_PACIFIC, _MOUNTAIN),
    "CA": (_PACIFIC,),
    "WA": (_PACIFIC,),
    "AK": ("America/Anchorage", "America/Adak"),
    "HI": ("Pacific/Honolulu",),
}
