"""Evaluations started from the lab: one background thread per job, stored like `pgkb eval` runs.

A job runs harness.evaluate.evaluate as the lab's role (SET ROLE), with the settings chosen on the page
as session settings of its own connection, so it is stored in kb.eval_runs / kb.eval_results with its
complete configuration, and the lab shows its progress (cases done of cases to do, per mode) until it
ends. Jobs live in this process only: a restarted lab forgets jobs, never runs (they are in the database).
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from .. import evaluate


@dataclass
class Job:
    id: int
    dataset: str
    modes: list[str]
    cases: int
    started: float = field(default_factory=time.time)
    done: int = 0
    state: str = "running"  # running | finished | failed
    error: str | None = None
    run_ids: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.cases * len(self.modes)

    @property
    def percent(self) -> float:
        return 100.0 * self.done / self.total if self.total else 100.0


class Jobs:
    """The evaluation jobs of one lab process."""

    def __init__(self) -> None:
        self._jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

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
        with self._lock:
            job = Job(id=next(self._ids), dataset=dataset, modes=modes, cases=len(cases))
            self._jobs[job.id] = job

        def one_case() -> None:
            job.done += 1

        def work() -> None:
            try:
                report = evaluate.evaluate(
                    dsn,
                    cases=cases,
                    dataset=dataset,
                    mode=",".join(modes),
                    k=k,
                    namespace=namespace,
                    settings=settings,
                    progress=False,
                    role=role,
                    on_case=one_case,
                )
                job.run_ids = {m: data["run_id"] for m, data in report["modes"].items()}
                job.done = job.total
                job.state = "finished"
            except psycopg.Error as exc:
                diag = getattr(exc, "diag", None)
                job.error = (diag.message_primary if diag else None) or str(exc)
                job.state = "failed"
            except Exception as exc:  # noqa: BLE001 (shown on the job's page, never lost in a thread)
                job.error = f"{type(exc).__name__}: {exc}"
                job.state = "failed"

        threading.Thread(target=work, name=f"pgkb-lab-eval-{job.id}", daemon=True).start()
        return job

    def as_dict(self, job: Job) -> dict[str, Any]:
        return {**job.__dict__, "total": job.total, "percent": job.percent}
