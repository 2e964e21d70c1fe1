from django.apps import AppConfig, apps


class AgentsConfig(AppConfig):
    name = "agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        import agents.capture.providers  # noqa: F401 - registers every provider's processing handler
        from agents import queue
        from agents.outbound import timers as outbound_timers

        queue.register()  # a forgotten person's task rows go with them
        from agents.outbound import provider_copies

        provider_copies.register()  # and their texts' bodies and recordings at Twilio

        outbound_timers.register()

        from agents import decisions, orchestrator
        from agents.capture import merges

        decisions.register()
        merges.register()  # what approving or rejecting a merge_contacts request does
        orchestrator.register()
        from agents.fit import exceptions as fit_exceptions

        fit_exceptions.register()
        from agents.booking import calendly, no_show
        from agents.booking import services as booking

        calendly.register()  # processing of Calendly's bookings, cancellations and no-shows
        from agents.revenue import stripe as stripe_payments

        stripe_payments.register()  # processing of Stripe's payments and refunds
        booking.register()  # appointment reminders
        no_show.register()  # the no-show rebooking deadline
        from agents import followup

        followup.register()  # sequence steps, estimate clocks, follow-up calls
        from agents.followup import inbound_messages

        inbound_messages.register()  # what follows a text or DM a person sent
        from agents.reporting import alerts, call_scoring, call_transcription, callrail_calls, daily_brief

        call_scoring.register()  # processing of Twilio's recording callbacks
        callrail_calls.register()  # processing of CallRail's calls, their transcripts scored
        call_transcription.register()  # a recording's speech to text (own job)
        alerts.register()  # Slack alerts are timers, posted by the timer runner
        daily_brief.register()  # so are the daily briefs
        from agents.reviews import requests as review_requests

        review_requests.register()  # a review request's delay is a timer
        from agents.reviews import google_business, replies

        google_business.register()  # Google Business Profile, connected like the systems of record
        replies.register()  # what approving a review reply does: it is posted to Google
        from agents.webhooks import delivery as webhooks

        webhooks.register()  # a commit that announced events wakes the webhooks cluster
        from agents.ai import inbound as ai_inbound

        ai_inbound.register()  # a language model's reading of inbound messages (own job)
        from agents.booking import receptionist

        receptionist.register()  # the after-hours receptionist (own job: it may call a model)
        from agents.ai import explain

        explain.register()  # a model's words on a fit score (own job)
        from agents.conversions import delivery as conversions

        conversions.register()  # a sequencer run that made uploads wakes their sender
        from agents.sync import engine as sync

        sync.register()  # the systems of record's adapters, their webhooks and the pushes they take
        from agents.schedules import schedules_ensure_on_migrate

        # agents has no models, so it gets no post_migrate of its own: hook the
        # django_q app's, after whose migrations the Schedule table exists.
        post_migrate.connect(schedules_ensure_on_migrate, sender=apps.get_app_config("django_q"))
