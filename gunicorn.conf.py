"""gunicorn settings read from the working directory by every `gunicorn` the project starts.

Prometheus' multiprocess mode (ekko_site.metrics): with PROMETHEUS_MULTIPROC_DIR set, the directory is
emptied when gunicorn starts (samples of a previous run would be added to this one's) and a worker that
exits is marked dead.
"""

import os
import shutil
from pathlib import Path

# Idle keep-alive connections stay open this long (gunicorn's default is 2 s, which the uvicorn worker
# takes as its keep-alive timeout): agents and load balancers reuse a connection between turns, and a
# connection closed under an idle client costs it a failed request or a new handshake.
keepalive = int(os.environ.get("EKKO_KEEPALIVE_SECONDS", "75"))


def on_starting(server) -> None:  # noqa: ANN001
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        shutil.rmtree(directory, ignore_errors=True)
        Path(directory).mkdir(parents=True, exist_ok=True)


def child_exit(server, worker) -> None:  # noqa: ANN001
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
