"""Fit and qualification: territory, job scope, fit score, offer, exception path."""
