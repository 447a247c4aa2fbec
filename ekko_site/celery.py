"""The Celery app. With CELERY_BROKER_URL set, Celery workers and beat run the tasks; without one,
every task goes to this process's background thread (`ekko_site.inprocess`), after the request."""

import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ekko_site.settings")

app = Celery("ekko", task_cls="ekko_site.inprocess:InProcessTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["memory.pipeline", "memory.webhooks"])  # memory/{pipeline,webhooks}/tasks.py


@signals.worker_init.connect
def serve_worker_metrics(**_kwargs) -> None:  # noqa: ANN003
    """With EKKO_WORKER_METRICS_PORT, a Celery worker serves its own Prometheus metrics (extraction
    outcomes, webhook deliveries, search arms) on that port, for the internal network only."""
    port = os.environ.get("EKKO_WORKER_METRICS_PORT")
    if port:
        from ekko_site.metrics import serve_worker_metrics as serve

        serve(int(port))
