from __future__ import annotations

from django.db import models


class PeriodicRun(models.Model):
    """The latest run of one periodic job, a row per job name, written at the
    end of every run. The queue health check reads these rather than
    django-q's result table, which keeps only the newest `save_limit` results
    of every task together: a burst of sends would push a minutely job's
    successes out of it and turn the check red while the job runs fine."""

    name = models.CharField(max_length=100)
    started_at = models.DateTimeField(help_text="when the latest run began")
    succeeded_at = models.DateTimeField(null=True, blank=True, help_text="when the latest successful run ended")
    failed_at = models.DateTimeField(null=True, blank=True, help_text="when the latest failed run ended")
    error = models.TextField(blank=True, help_text="the latest failure's error")
    result = models.JSONField(default=dict, blank=True, help_text="the latest successful run's counts")
    runs = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["name"], name="crm_periodicrun_unique_name")]

    def __str__(self) -> str:
        return self.name
