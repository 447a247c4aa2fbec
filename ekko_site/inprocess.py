"""Background work without a broker: a queue and one thread per process, the beat schedule included.

With `CELERY_BROKER_URL` unset the Celery app's broker is `memory://`, and `InProcessTask.apply_async`
(every task's base class, see `ekko_site.celery`) hands the call to `worker` instead of a broker: the
request that queued it returns first, then the thread runs the tasks in order of when they are due,
honouring `countdown` and `eta`, each through Celery's own `Task.apply` (so a failure is logged by
Celery and the thread goes on). The serving processes (`ekko_site.wsgi`, `ekko_site.asgi`) also run
the sweeps of `CELERY_BEAT_SCHEDULE` — once at start, then on their intervals — the way Celery beat
does with a broker. Other processes (management commands) start the thread with their first task and
finish what is due before they exit.

Nothing that matters lives only in this queue: the database already says what is left (extraction
runs still queued or retrying, rows without vectors, cards past their expiry), so work lost with a
process is picked up by the sweeps of the next one. With a broker set, none of this runs: Celery
workers and beat do the work.

The test suite turns `worker.autostart` off and runs the queue in the test's own thread with
`drain_background()`, so queued work sees the test's transaction.
"""

from __future__ import annotations

import atexit
import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from celery import Task
from celery.schedules import maybe_schedule

logger = logging.getLogger(__name__)

NO_BROKER = "memory://"
EXIT_WAIT_SECONDS = 30.0  # how long an exiting process finishes tasks that are already due


def in_process(app: Any) -> bool:
    """Return whether `app` has no broker, so its tasks run on this process's thread."""
    return app.conf.broker_url == NO_BROKER and not app.conf.task_always_eager


@dataclass(order=True)
class _Call:
    due: float
    seq: int
    task: Task = field(compare=False)
    args: tuple = field(compare=False, default=())
    kwargs: dict = field(compare=False, default_factory=dict)
    task_id: str | None = field(compare=False, default=None)


@dataclass
class _Periodic:
    name: str
    task: str
    schedule: Any
    args: tuple
    kwargs: dict
    due: float


class InProcessWorker:
    """A queue of task calls, ordered by when they are due, and the thread that runs them."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.autostart = True
        self._reset()

    def _reset(self) -> None:
        self._condition = threading.Condition()
        self._queue: list[_Call] = []
        self._periodic: list[_Periodic] = []
        self._sequence = itertools.count()
        self._thread: threading.Thread | None = None
        self._busy = 0
        self._stopping = False
        self._beat: Mapping[str, Mapping[str, Any]] | None = None

    def after_fork(self) -> None:
        """Start afresh in a forked child (gunicorn --preload): threads do not survive a fork, and the
        parent still runs the parent's queue."""
        beat = self._beat
        self._reset()
        if beat is not None:
            self.start(beat=beat)

    # --- queueing ---------------------------------------------------------------------------

    def submit(self, task: Task, args: tuple = (), kwargs: dict | None = None, *, task_id: str | None = None,
               countdown: float | None = None, eta: datetime | None = None) -> None:
        """Queue `task(*args, **kwargs)` to run after `countdown` seconds or at `eta` (else at once)."""
        delay = float(countdown or 0)
        if eta is not None:
            delay = max(delay, (eta - datetime.now(tz=eta.tzinfo)).total_seconds())
        call = _Call(self.clock() + max(delay, 0.0), next(self._sequence), task, tuple(args or ()),
                     dict(kwargs or {}), task_id)
        with self._condition:
            heapq.heappush(self._queue, call)
            self._condition.notify_all()
        if self.autostart:
            self.start()

    def pending(self) -> list[str]:
        """Return the names of the queued tasks, soonest first."""
        with self._condition:
            return [call.task.name for call in sorted(self._queue)]

    def clear(self) -> None:
        """Forget every queued call (the periodic sweeps stay)."""
        with self._condition:
            self._queue.clear()

    # --- the thread ---------------------------------------------------------------------------

    def schedule(self, beat: Mapping[str, Mapping[str, Any]]) -> None:
        """Send the sweeps of a beat schedule (`CELERY_BEAT_SCHEDULE`): now, then on their intervals."""
        with self._condition:
            now = self.clock()
            self._beat = beat
            self._periodic = [
                _Periodic(name, entry["task"], maybe_schedule(entry["schedule"]),
                          tuple(entry.get("args", ())), dict(entry.get("kwargs", {})), due=now)
                for name, entry in beat.items()
            ]
            self._condition.notify_all()

    def start(self, *, beat: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        """Start the thread if it is not running; with `beat`, it also sends those sweeps."""
        if beat is not None and self._beat is None:
            self.schedule(beat)
        with self._condition:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._loop, name="ekko-background", daemon=True)
            self._thread.start()

    def stop(self, *, timeout: float = EXIT_WAIT_SECONDS) -> bool:
        """Finish the tasks already due (for up to `timeout` seconds), then stop the thread."""
        finished = self.wait_idle(timeout=timeout)
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=max(timeout, 1.0))
        with self._condition:
            self._thread, self._beat, self._periodic = None, None, []
        return finished

    def wait_idle(self, *, timeout: float) -> bool:
        """Wait until no task is due or running (countdowns still ahead do not count); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._condition:
            while self._busy or self._due_call() is not None:
                if self._thread is None or not self._thread.is_alive():
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._condition.wait(timeout=min(remaining, 0.5))
        return True

    def _loop(self) -> None:
        from django.db import connections

        try:
            while True:
                with self._condition:
                    call = self._next_or_wait()
                    if call is None:
                        return
                    self._busy += 1
                try:
                    self._execute(call, own_connections=True)
                finally:
                    with self._condition:
                        self._busy -= 1
                        self._condition.notify_all()
        finally:
            connections.close_all()

    def _next_or_wait(self) -> _Call | None:
        """Return the next due call, waiting for it; None once stopping. Hold the condition."""
        while not self._stopping:
            self._send_due_sweeps()
            call = self._due_call()
            if call is not None:
                return heapq.heappop(self._queue)
            upcoming = [c.due for c in self._queue[:1]] + [p.due for p in self._periodic]
            self._condition.wait(timeout=max(min(upcoming) - self.clock(), 0.01) if upcoming else None)
        return None

    def _due_call(self) -> _Call | None:
        return self._queue[0] if self._queue and self._queue[0].due <= self.clock() else None

    def _send_due_sweeps(self) -> None:
        from ekko_site.celery import app

        now = self.clock()
        for sweep in self._periodic:
            if sweep.due > now:
                continue
            try:
                task = app.tasks[sweep.task]
                next_in = sweep.schedule.remaining_estimate(sweep.schedule.now()).total_seconds()
            except Exception:  # noqa: BLE001 - a broken entry must not stop the other sweeps
                logger.exception("beat entry %r cannot be sent; trying again in a minute", sweep.name)
                sweep.due = now + 60.0
                continue
            heapq.heappush(self._queue, _Call(now, next(self._sequence), task, sweep.args, sweep.kwargs))
            sweep.due = now + max(next_in, 1.0)

    def _execute(self, call: _Call, *, own_connections: bool) -> None:
        from django.db import close_old_connections

        if own_connections:
            close_old_connections()
        try:
            # Celery's own local execution: request context, signals, and a logged traceback on failure.
            call.task.apply(args=call.args, kwargs=call.kwargs, task_id=call.task_id)
        except Exception:  # noqa: BLE001 - one task's failure must not stop the queue
            logger.exception("in-process task %s%r failed", call.task.name, call.args)
        finally:
            if own_connections:
                close_old_connections()

    # --- without the thread ---------------------------------------------------------------------

    def run_due(self) -> int:
        """Run the tasks (and sweeps) due now in the calling thread; return how many ran."""
        ran = 0
        while True:
            with self._condition:
                self._send_due_sweeps()
                call = self._due_call()
                if call is None:
                    return ran
                heapq.heappop(self._queue)
            self._execute(call, own_connections=False)
            ran += 1

    def drain(self, *, limit: int = 1000) -> int:
        """Run every queued task now in the calling thread, countdowns included, until none is left."""
        for ran in range(limit + 1):
            with self._condition:
                if not self._queue:
                    return ran
                call = heapq.heappop(self._queue)
            if ran == limit:
                raise RuntimeError(f"the background queue still grows after {limit} tasks: a task re-queues "
                                   "itself; look at the pending ones with worker.pending()")
            self._execute(call, own_connections=False)
        return limit


worker = InProcessWorker()
os.register_at_fork(after_in_child=worker.after_fork)


def drain_background() -> int:
    """Run all queued background work now, in this thread (tests: what would have run after the request)."""
    return worker.drain()


def serve_background() -> None:
    """Start the thread with the beat schedule in a serving process (no broker: nothing else runs sweeps)."""
    from ekko_site.celery import app

    if in_process(app):
        app.loader.import_default_modules()  # the tasks the beat schedule names (a worker does this at start)
        worker.start(beat=app.conf.beat_schedule or {})


class InProcessTask(Task):
    """The base of every Ekko task: without a broker, queue the call on this process's thread."""

    def apply_async(self, args: Any = None, kwargs: Any = None, task_id: str | None = None,
                    **options: Any) -> Any:
        if not in_process(self.app):
            return super().apply_async(args, kwargs, task_id=task_id, **options)
        from celery.utils import uuid

        task_id = task_id or uuid()
        worker.submit(self, tuple(args or ()), dict(kwargs or {}), task_id=task_id,
                      countdown=options.get("countdown"), eta=options.get("eta"))
        return self.AsyncResult(task_id)


@atexit.register
def _finish_due_work() -> None:
    if worker._thread is not None:
        worker.stop(timeout=EXIT_WAIT_SECONDS)
