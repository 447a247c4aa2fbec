"""Run test work side by side in threads on the real database."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from django.db import connection


def side_by_side(work: Callable[[str], None],
                 names: Sequence[str] = ("left", "right")) -> list[BaseException]:
    """Run `work(name)` in one thread per name, released together; return what the threads raised.

    Each thread has its own database connection and closes it when done.
    """
    start = threading.Barrier(len(names))
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            start.wait()
            work(name)
        except BaseException as exc:  # noqa: BLE001 - returned to the test, which asserts on it
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors
