"""Driver-side work run in a thread beside the Spark job the write waits on.

A write's driver mostly waits: on the count job, then on the job whose tasks write the slices.
What it needs next and can compute meanwhile (the sample that sizes the slices, the lineage
read from the plan) is cheaper done in that wait than after it. The thread is Spark's kind of
thread (``inheritable_thread_target``: it keeps the caller's job group, tags and scheduler
pool), and its jobs carry a tag of their own, so the caller can cancel them when it no longer
wants the answer.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Beside(Generic[T]):
    """``work()`` running in a thread of its own on a classic Spark session's driver."""

    def __init__(self, spark, name: str, work: Callable[[], T]) -> None:
        from pyspark.util import inheritable_thread_target

        self._context = spark.sparkContext
        self._tag = f"odf-chain-{name}-{uuid.uuid4().hex[:12]}"
        self._value: T | None = None
        self._error: BaseException | None = None

        def run() -> None:
            self._context.addJobTag(self._tag)
            try:
                self._value = work()
            except BaseException as exc:  # handed to whoever asks for the result
                self._error = exc
            finally:
                self._context.removeJobTag(self._tag)

        self._thread = threading.Thread(
            target=inheritable_thread_target(spark)(run), name=f"odf-chain {name}", daemon=True
        )
        self._thread.start()

    def result(self) -> T:
        """The work's result (or its exception), waiting for it."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def done_or_cancel(self, wait: float = 0.0) -> tuple[bool, T | None]:
        """(True, its result) if the work is done within ``wait`` seconds and did not fail;
        otherwise its Spark jobs are cancelled until the thread ends (a job it submits after
        a cancel is caught by the next, a tenth of a second later), and (False, None)."""
        self._thread.join(wait)
        while self._thread.is_alive():
            self._context.cancelJobsWithTag(self._tag)
            self._thread.join(0.1)
        if self._error is not None:
            return False, None
        return True, self._value

    @staticmethod
    def possible(spark) -> bool:
        """Is there a driver-side context to run jobs from another thread (not Spark Connect)?"""
        try:
            spark.sparkContext  # noqa: B018 (raises under Spark Connect)
        except Exception:
            return False
        return True
