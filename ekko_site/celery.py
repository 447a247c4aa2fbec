"""The Celery app. With CELERY_BROKER_URL set, Celery workers and beat run the tasks; without one,
every task goes to this process's background thread (`ekko_site.inprocess`), after the request."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ekko_site.settings")

app = Celery("ekko", task_cls="ekko_site.inprocess:InProcessTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["memory.pipeline"])  # memory/pipeline/tasks.py
