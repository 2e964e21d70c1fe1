"""The sequence engine: follow-up paths that run on their own clock and stop
the moment they should.

A `Sequence` is a business's path for one trigger (`no_reply`, `no_show`,
`open_estimate`, `appointment`): timed steps on a channel (sms, email, voice,
task). An `Enrollment` is one lead's place in one path.

- `engine`: enrollments — start (`enrollment_start`), stop
  (`enrollments_stop`), resume after a hold, one path per person at a time,
  the shared exits and the trigger's own (`TRIGGER_EXITS`), completion hooks
  (`ON_COMPLETE`), the step timer (`step_run`, kind `sequence.step`) and its
  receipts.
- `steps`: a sequence's steps (`sequence_steps`), when each is due on the
  absolute or business clock (`step_due`), the approved text a message step
  sends (`step_render`) and performing a step: a task, a message through the
  gate, or a channel's runner (`CHANNEL_RUNNERS`: voice).
- `preview`: `sequence_preview`, the dry run of a path for a lead, judged by
  the gate as it would be then, with a channel's own check
  (`CHANNEL_PREVIEWS`).

`engine` and `preview` read `steps`; `steps` reads neither. Import each name
from the module that owns it.
"""
