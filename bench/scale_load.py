"""HTTP load for the scale bench: closed-loop clients (1..N threads, one connection each) and open-loop steps.

`closed_loop` runs `clients` threads that each send their share of `requests` back to back; latency
is per request, throughput is requests over wall time. `open_loop` offers a fixed rate (Poisson
arrivals) to a pool of connections and measures each request from its scheduled start, so queueing
shows in the latency; `saturation` steps the offered rate until p95 doubles.
"""

from __future__ import annotations

import http.client
import json
import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench._common import percentiles

# make(i) -> (path under /api/v1/, JSON body); one call per request
RequestMaker = Callable[[int], tuple[str, dict]]


class ApiConnection:
    """One keep-alive HTTP connection to the bench server with an API key."""

    def __init__(self, port: int, key: str) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def send(self, method: str, path: str, body: dict | None = None) -> tuple[float, int, bytes]:
        payload = json.dumps(body, ensure_ascii=False).encode() if body is not None else None
        started = time.perf_counter()
        for attempt in (1, 2):
            try:
                self.conn.request(method, f"/api/v1/{path}", body=payload, headers=self.headers)
                response = self.conn.getresponse()
                data = response.read()
                return (time.perf_counter() - started) * 1000, response.status, data
            except (http.client.HTTPException, OSError) as exc:
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
                # As HTTP clients do: a kept-alive connection the server closed while idle is retried once.
                if attempt == 2 or not isinstance(exc, (http.client.RemoteDisconnected, ConnectionResetError,
                                                        BrokenPipeError)):
                    break
        return (time.perf_counter() - started) * 1000, 599, b"connection error"

    def post(self, path: str, body: dict) -> tuple[float, int, bytes]:
        return self.send("POST", path, body)

    def close(self) -> None:
        self.conn.close()


@dataclass
class Run:
    """Latencies (ms) of one measurement, its errors and wall time."""

    samples: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    seconds: float = 0.0

    @property
    def throughput(self) -> float:
        return len(self.samples) / self.seconds if self.seconds else 0.0

    def stats(self) -> dict[str, float]:
        return percentiles(self.samples)

    def record(self, elapsed: float, status: int, data: bytes) -> None:
        self.samples.append(elapsed)
        if status >= 400:
            self.errors += 1
            self.first_error = self.first_error or f"{status}: {data[:300]!r}"


def closed_loop(port: int, key: str, make: RequestMaker, *, clients: int, requests: int, warmup: int = 5,
                start_index: int = 0) -> Run:
    """Send `requests` requests from `clients` threads (each its own connection), after `warmup` each."""
    run = Run()
    lock = threading.Lock()
    counter = iter(range(start_index, start_index + requests))
    barrier = threading.Barrier(clients + 1)

    def client(number: int) -> None:
        connection = ApiConnection(port, key)
        for i in range(warmup):
            connection.post(*make(start_index - 1_000_000 - number * warmup - i))
        barrier.wait()
        while True:
            with lock:
                index = next(counter, None)
            if index is None:
                break
            elapsed, status, data = connection.post(*make(index))
            with lock:
                run.record(elapsed, status, data)
        connection.close()

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    run.seconds = time.perf_counter() - started
    return run


def open_loop(port: int, key: str, make: RequestMaker, *, rate: float, seconds: float, connections: int = 32,
              seed: int = 1, start_index: int = 0) -> Run:
    """Offer `rate` requests/s (Poisson arrivals) for `seconds`; latency counts from each scheduled start."""
    rng = random.Random(seed)
    schedule, moment = [], 0.0
    while moment < seconds:
        moment += rng.expovariate(rate)
        schedule.append(moment)
    jobs: queue.Queue = queue.Queue()
    run = Run()
    lock = threading.Lock()

    def worker() -> None:
        connection = ApiConnection(port, key)
        while (job := jobs.get()) is not None:
            index, due = job
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            _, status, data = connection.post(*make(index))
            elapsed = (time.perf_counter() - due) * 1000
            with lock:
                run.record(elapsed, status, data)
        connection.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(connections)]
    for thread in threads:
        thread.start()
    started = time.perf_counter()
    for offset, at in enumerate(schedule):
        jobs.put((start_index + offset, started + at))
    for _ in threads:
        jobs.put(None)
    for thread in threads:
        thread.join()
    run.seconds = time.perf_counter() - started
    return run


@dataclass(frozen=True)
class Step:
    offered: float
    run: Run


FACTORS = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)


def saturation(port: int, key: str, make: RequestMaker, *, base_rate: float, base_p95: float, seconds: float,
               min_requests: int = 40, report: Callable[[Step], None] = lambda step: None) -> list[Step]:
    """Offer `base_rate` x FACTORS in turn until p95 exceeds twice `base_p95` (or errors appear).

    `base_rate` and `base_p95` are one client's, back to back. Each step lasts `seconds`, or long enough
    for `min_requests` requests.
    """
    steps: list[Step] = []
    for number, factor in enumerate(FACTORS):
        rate = base_rate * factor
        run = open_loop(port, key, make, rate=rate, seconds=max(seconds, min_requests / rate),
                        start_index=number * 100_000)
        steps.append(Step(rate, run))
        report(steps[-1])
        if run.stats()["p95"] > 2 * base_p95 or run.errors:
            break
    return steps
