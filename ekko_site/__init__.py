"""Ekko Memory Django project: settings, URLs, Celery app and the embedded-database bootstrap."""

from ekko_site.celery import app as celery_app

__all__ = ["celery_app"]
