"""Evaluations started from the lab, bounded, stored like `pgkb eval` runs.

A job runs harness.evaluate.evaluate as the lab's role (SET ROLE), with the settings chosen on the page
as session settings of its own connection, so it is stored in kb.eval_runs / kb.eval_results with its
complete configuration, and the lab shows its progress (cases done of cases to do, per mode) until it
ends. Jobs live in this process only: a restarted lab forgets jobs, never runs (they are in the database).

Bounds (stated on the evaluation page): a job asks at most MAX_CASE_K cases × k per mode; a role runs
MAX_RUNNING_PER_ROLE job at a time, the next MAX_QUEUED_PER_ROLE wait in its queue and any more are
refused; a running or queued job can be cancelled (it stops before its next case and stores nothing of
the mode it was in).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import psycopg

from .. import evaluate

MAX_CASE_K = 50_000  # cases × k of one job (per mode): e.g. 500 cases at k 100
MAX_RUNNING_PER_ROLE = 1
MAX_QUEUED_PER_ROLE = 3


class JobRefused(ValueError):
    """A job over a bound: too many cases × k (status 400), or the role's queue is full (429: try later)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class Cancelled(Exception):
    """Raised inside a job's thread before its next case once the job is cancelled."""


@dataclass
class Job:
    id: int
    dataset: str
    modes: list[str]
    cases: int
    role: str = ""
    k: int = 0
    started: float = field(default_factory=time.time)
    done: int = 0
    state: str = "queued"  # queued | running | finished | failed | cancelled
    error: str | None = None
    run_ids: dict[str, int] = field(default_factory=dict)
    cancel_requested: bool = False

    @property
    def total(self) -> int:
        return self.cases * len(self.modes)

    @property
    def percent(self) -> float:
        return 100.0 * self.done / self.total if self.total else 100.0


class Jobs:
    """The evaluation jobs of one lab process: a queue per role, MAX_RUNNING_PER_ROLE running at a time."""

    def __init__(self) -> None:
        self._jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._queues: dict[str, deque] = {}
        self._running: dict[str, int] = {}

    def get(self, job_id: int) -> Job | None:
        return self._jobs.get(job_id)

    def recent(self) -> list[Job]:
        return sorted(self._jobs.values(), key=lambda j: j.id, reverse=True)[:20]

    def start(
        self,
        dsn: str,
        role: str | None,
        *,
        cases: list[evaluate.Case],
        dataset: str,
        modes: list[str],
        k: int,
        namespace: str | None,
        settings: dict[str, str],
    ) -> Job:
        """Queue a job for the role and start it when the role has a free slot; JobRefused over a bound."""
        if len(cases) * k > MAX_CASE_K:
            raise JobRefused(
                f"{len(cases)} cases at k {k} is {len(cases) * k:,} case × k, over the lab's bound of "
                f"{MAX_CASE_K:,} per job: lower k or split the cases (pgkb eval has no such bound)"
            )
        key = role or ""
        with self._lock:
            queue = self._queues.setdefault(key, deque())
            if len(queue) >= MAX_QUEUED_PER_ROLE:
                raise JobRefused(
                    f"the role {role or 'of the lab'} already has {len(queue)} evaluation jobs waiting (at most "
                    f"{MAX_QUEUED_PER_ROLE}): wait for one to end or cancel one",
                    status=429,
                )
            job = Job(id=next(self._ids), dataset=dataset, modes=modes, cases=len(cases), role=key, k=k)
            self._jobs[job.id] = job
            queue.append((job, dict(dsn=dsn, role=role, cases=cases, namespace=namespace, settings=settings)))
        self._next(key)
        return job

    def cancel(self, job_id: int) -> Job | None:
        """Cancel a queued job (it never runs) or a running one (it stops before its next case)."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.state not in ("queued", "running"):
                return job
            job.cancel_requested = True
            if job.state == "queued":
                queue = self._queues.get(job.role, deque())
                self._queues[job.role] = deque(item for item in queue if item[0] is not job)
                job.state = "cancelled"
        return job

    def _next(self, key: str) -> None:
        """Start the role's next queued job if it has a free slot."""
        with self._lock:
            queue = self._queues.get(key)
            if not queue or self._running.get(key, 0) >= MAX_RUNNING_PER_ROLE:
                return
            job, arguments = queue.popleft()
            self._running[key] = self._running.get(key, 0) + 1
            job.state = "running"
            job.started = time.time()
        threading.Thread(target=self._work, args=(job, arguments), name=f"pgkb-lab-eval-{job.id}", daemon=True).start()

    def _work(self, job: Job, arguments: dict[str, Any]) -> None:
        def one_case() -> None:
            if job.cancel_requested:
                raise Cancelled
            job.done += 1

        try:
            evaluate.evaluate(
                arguments["dsn"],
                cases=arguments["cases"],
                dataset=job.dataset,
                mode=",".join(job.modes),
                k=job.k,
                namespace=arguments["namespace"],
                settings=arguments["settings"],
                progress=False,
                role=arguments["role"],
                on_case=one_case,
                on_stored=job.run_ids.__setitem__,
            )
            job.done = job.total
            job.state = "finished"
        except Cancelled:
            job.state = "cancelled"
        except psycopg.Error as exc:
            diag = getattr(exc, "diag", None)
            job.error = (diag.message_primary if diag else None) or str(exc)
            job.state = "failed"
        except Exception as exc:  # noqa: BLE001 (shown on the job's page, never lost in a thread)
            job.error = f"{type(exc).__name__}: {exc}"
            job.state = "failed"
        finally:
            with self._lock:
                self._running[job.role] -= 1
            self._next(job.role)

    def as_dict(self, job: Job) -> dict[str, Any]:
        return {**job.__dict__, "total": job.total, "percent": job.percent}
