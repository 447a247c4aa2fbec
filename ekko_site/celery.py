"""The Celery app. With CELERY_BROKER_URL unset, tasks run in-process (eagerly) so nothing else is needed."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ekko_site.settings")

app = Celery("ekko")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["memory.pipeline"])  # memory/pipeline/tasks.py
