"""Ekko Memory Django project: settings, URLs, Celery app and the embedded-database bootstrap."""
