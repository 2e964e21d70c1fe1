"""Loading one business from its YAML file (demo/acme-hvac.yaml shows every key).

`business_file_load` is the entry point. It guarantees:

- Everything is read and checked before anything is kept: the YAML is parsed
  with the line of every key and list item remembered, so each refusal names
  the line and the reason (`line 7: unknown key 'colour' in team member`).
- The whole load is one transaction. Any error (a bad value, an unknown key,
  a reference to something neither the file nor the business has) rolls
  everything back: nothing is written, not even a new user.
- It is idempotent. Each row is compared with what the file asks for and only
  changed fields are saved; an unchanged row is not touched (its `updated_at`
  stays put). When anything changed, one receipt (`business.loaded`) records
  the counts; a run that changes nothing writes no receipt.
- The file is authoritative for the rows it lists (an optional key left out
  means the model's default), and silent about the rest: rows and sections
  the file does not mention (a source, a team member, the whole `policy`)
  are left as they are, never deleted or reset.

`availability` rules (members on the team, days, slots, capacity, optional
service lines) are stored as `Availability` rows. A rule is known by its
members, days and slots; its capacity and lines are updated in place. When
the file has an `availability` section it is authoritative for the
business's rules: a rule no longer listed is switched off (`is_active`),
never deleted, because booked appointments point at it.

The package, in the order a load runs:

- `reading`: the YAML with line numbers, `BusinessFileError`, and `Map`, the
  typed getters that turn one mapping's raw values into checked ones naming
  the line of any refusal.
- `parsing`: `business_file_parse` and one `_parse_*` function per section,
  producing a `BusinessSpec` of rows; it never touches the database.
- `applying`: `business_spec_apply` (the transaction, the per-slug lock, the
  references only the database can check, the receipt) and
  `business_file_load`, which reads the file and runs both stages.
"""

from crm.services.business_file.applying import BusinessLoadResult, business_file_load, business_spec_apply
from crm.services.business_file.parsing import BusinessSpec, business_file_parse
from crm.services.business_file.reading import BusinessFileError

__all__ = [
    "BusinessFileError",
    "BusinessLoadResult",
    "BusinessSpec",
    "business_file_load",
    "business_file_parse",
    "business_spec_apply",
]
