"""Owner assignment: capacity reader, skill matcher, round robin, task creator,
SLA timer and exception alert, tied together by the orchestrator's steps."""
