"""The evaluation pages: runs with a trend line per configuration and the form that starts one, a job in the
background and its progress, one run with links that ask each case again exactly, and run against run.

Roles that may not read kb.eval_runs see a page that says so; starting a run stores it, so only members of
pgkb_admin may (and the form needs this process's token).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ... import evaluate, retrieval
from ...config import REPO_ROOT
from .. import queries, render
from .. import runs as lab_runs
from ..context import LabContext, nonnegative_int
from ..database import NotPermitted
from ..forms import FormError, settings_from
from ..jobs import MAX_CASE_K, MAX_QUEUED_PER_ROLE, JobRefused

MAX_UPLOAD = 5_000_000  # bytes of an uploaded case file


def denied_eval(lab: LabContext, request: Request) -> Response:
    return lab.page(request, "eval.html", {"nav": "eval", "denied": True, "runs": []}, status=403)


def eval_page(lab: LabContext, request: Request) -> Response:
    p = request.query_params

    def work(conn):
        if not queries.permissions(conn)["eval"]:
            return None
        return {
            "runs": queries.eval_runs(conn),
            "may_run": queries.may_run_eval(conn),
            "namespaces": queries.namespaces(conn),
            "settings": queries.query_settings(conn),
        }

    data = lab.db.run(work)
    if data is None:
        return denied_eval(lab, request)
    runs = data["runs"]
    datasets = sorted({r["dataset"] for r in runs})
    dataset = p.get("dataset") or (runs[0]["dataset"] if runs else None)
    selected = [r for r in runs if r["dataset"] == dataset]
    metric_names = render.numeric_metrics(selected)
    metric = p.get("metric") or (metric_names[0] if metric_names else "ndcg@10")
    configs = lab_runs.configurations(selected)
    return lab.page(
        request,
        "eval.html",
        {
            "nav": "eval",
            "denied": False,
            "runs": selected,
            "all_runs": runs,
            "datasets": datasets,
            "dataset": dataset,
            "metric": metric,
            "metric_names": metric_names,
            "configs": configs,
            "chart": render.trend_svg(selected, metric, series=configs),
            "may_run": data["may_run"],
            "job_bounds": {"case_k": MAX_CASE_K, "queued": MAX_QUEUED_PER_ROLE},
            "meta": {"namespaces": data["namespaces"], "settings": data["settings"]},
            "case_files": case_files(),
            "jobs": lab.jobs.recent(),
            "modes_all": retrieval.MODES,
        },
    )


async def eval_start(lab: LabContext, request: Request) -> Response:
    form = await lab.checked_form(request)
    upload = form.get("upload")
    uploaded = await upload.read(MAX_UPLOAD + 1) if upload is not None and hasattr(upload, "read") else b""
    return await run_in_threadpool(_eval_start, lab, request, form, uploaded)


def _eval_start(lab: LabContext, request: Request, form: Any, uploaded: bytes) -> Response:
    def check(conn):
        return {
            "may_run": queries.may_run_eval(conn),
            "settings": queries.query_settings(conn),
            "namespaces": queries.namespaces(conn),
        }

    meta = lab.db.run(check)
    if not meta["may_run"]:
        raise NotPermitted(
            f"the role {lab.db.role_label} may not run evaluations: running one stores it in kb.eval_runs",
            "grant pgkb_admin to the lab's role",
        )
    try:
        cases, dataset = chosen_cases(lab, form, uploaded)
        settings = settings_from(form, "set.", {s["key"] for s in meta["settings"]})
        modes = [m for m in form.getlist("modes") if m in retrieval.MODES] or ["auto"]
        k = int(form.get("k") or 100)
        if not 1 <= k <= 1000:
            raise FormError(f"k must be between 1 and 1000, not {k}")
    except (FormError, ValueError, RuntimeError) as exc:
        raise HTTPException(400, f"cannot start the evaluation: {exc}") from exc
    namespace = str(form.get("namespace") or "").strip() or None
    if namespace and namespace not in {n["namespace"] for n in meta["namespaces"]}:
        raise HTTPException(
            400, f"unknown namespace {namespace!r}: the role {lab.db.role_label} sees no document in it"
        )
    lab.db.run(lambda conn: None, settings=settings)  # each setting checked by kb.setting before the job starts
    return start_job(
        lab,
        "cannot start the evaluation",
        cases=cases,
        dataset=dataset,
        modes=modes,
        k=k,
        namespace=namespace,
        settings=settings,
    )


def start_job(lab: LabContext, refused: str, **job: Any) -> Response:
    """Queue an evaluation job as the lab's role and show its page; a bound it is over is the HTTP error."""
    try:
        started = lab.jobs.start(lab.db.dsn, lab.db.role, **job)
    except JobRefused as exc:
        raise HTTPException(exc.status, f"{refused}: {exc}") from None
    return RedirectResponse(f"/eval/jobs/{started.id}", status_code=303)


async def run_again(lab: LabContext, request: Request) -> Response:
    """POST /eval/{id}/again: the run's cases, mode, k, namespace and every setting of its configuration
    asked again as a new job (stored cases: the case set version comes out the same)."""
    await lab.checked_form(request)
    return await run_in_threadpool(_run_again, lab, request.path_params["id"])


def _run_again(lab: LabContext, run_id: int) -> Response:
    def work(conn):
        if not queries.may_run_eval(conn):
            return "denied"
        run = queries.eval_run(conn, run_id)
        if run is None:
            return None
        return run, queries.eval_results(conn, run_id), {s["key"] for s in queries.query_settings(conn)}

    data = lab.db.run(work)
    if data == "denied":
        raise NotPermitted(
            f"the role {lab.db.role_label} may not run evaluations", "grant pgkb_admin to the lab's role"
        )
    if data is None:
        raise HTTPException(404, f"no evaluation run {run_id} that the role {lab.db.role_label} can see")
    run, results, overridable = data
    cases = evaluate.cases_from(
        [{**r, "id": r["case_id"]} for r in sorted(results, key=lambda r: r["case_id"])], f"run {run_id}"
    )
    config = run["configuration"] or {}
    recorded = config.get("settings") or run["params"].get("settings") or {}
    return start_job(
        lab,
        "cannot run it again",
        cases=cases,
        dataset=run["dataset"],
        modes=[run["mode"]],
        k=int(run["params"].get("k") or config.get("k") or 100),
        namespace=run["params"].get("namespace"),
        settings={key: _setting_text(value) for key, value in recorded.items() if key in overridable},
    )


async def job_cancel(lab: LabContext, request: Request) -> Response:
    """POST /eval/jobs/{id}/cancel: cancel a queued or running job of this lab, then its page."""
    await lab.checked_form(request)
    job = lab.jobs.cancel(request.path_params["id"])
    if job is None:
        raise HTTPException(404, f"no evaluation job {request.path_params['id']} in this lab process")
    return RedirectResponse(f"/eval/jobs/{job.id}", status_code=303)


def chosen_cases(lab: LabContext, form: Any, uploaded: bytes) -> tuple[list[evaluate.Case], str]:
    """The cases a run asks and the dataset it is stored as: the uploaded file, the judged cases, or a case file."""
    source = str(form.get("source") or "")
    if uploaded:
        if len(uploaded) > MAX_UPLOAD:
            raise FormError(f"the case file is larger than {MAX_UPLOAD // 1_000_000} MB")
        name = getattr(form.get("upload"), "filename", None) or "upload.json"
        try:
            data = json.loads(uploaded.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise FormError(f"{name} is not a JSON list of cases: {exc}") from None
        return evaluate.cases_from(data, name), f"cases:{Path(name).name}"
    if source == "judged":
        cases = lab.db.run(evaluate.judged_cases)
        if not cases:
            raise FormError("there are no ready judged cases yet: judge results on the query page first")
        return cases, "judged:kb.judged_cases"
    files = {f.name: f for f in case_files()}
    if source.startswith("file:") and source[5:] in files:
        path = files[source[5:]]
        return evaluate.load_cases(str(path)), f"cases:{path.name}"
    raise FormError("choose a case file, the judged cases, or upload a JSON list of cases")


def job_page(lab: LabContext, request: Request) -> Response:
    job = lab.jobs.get(request.path_params["id"])
    if job is None:
        raise HTTPException(404, f"no evaluation job {request.path_params['id']} in this lab process")
    return lab.page(request, "eval_job.html", {"nav": "eval", "job": job})


def eval_run_page(lab: LabContext, request: Request) -> Response:
    run_id = request.path_params["id"]
    only_failures = request.query_params.get("only") == "failures"

    def work(conn):
        if not queries.permissions(conn)["eval"]:
            return "denied"
        run = queries.eval_run(conn, run_id)
        if run is None:
            return None
        return {
            "run": run,
            "results": queries.eval_results(conn, run_id),
            "dataset_runs": queries.eval_runs(conn, run["dataset"]),
            "in_force": {s["key"]: s["value"] for s in queries.query_settings(conn)},
        }

    data = lab.db.run(work)
    if data == "denied":
        return denied_eval(lab, request)
    if data is None:
        raise HTTPException(404, f"no evaluation run {run_id} that the role {lab.db.role_label} can see")
    run = data["run"]
    results = data["results"]
    if only_failures:
        results = [r for r in results if not lab_runs.passed(r)]
    links = {r["case_id"]: case_link(r, run, data["in_force"]) for r in results}
    failed_cases = {r["case_id"] for r in data["results"] if not lab_runs.passed(r)}
    metric = request.query_params.get("metric") or "ndcg@10"
    configs = lab_runs.configurations(data["dataset_runs"])
    others = [r for r in data["dataset_runs"] if r["id"] != run["id"]]
    return lab.page(
        request,
        "eval_run.html",
        {
            "nav": "eval",
            "run": run,
            "results": results,
            "links": links,
            "only_failures": only_failures,
            "metric": metric,
            "failed": failed_cases,
            "config": next((c for c in configs if c["key"] == run["series_key"]), None),
            "others": others,
            "chart": render.trend_svg(data["dataset_runs"], metric, run["id"], series=configs),
        },
    )


def run_against_run_page(lab: LabContext, request: Request) -> Response:
    p = request.query_params
    left_id, right_id = nonnegative_int(p.get("a"), 0), nonnegative_int(p.get("b"), 0)

    def work(conn):
        if not queries.permissions(conn)["eval"]:
            return "denied"
        left, right = queries.eval_run(conn, left_id), queries.eval_run(conn, right_id)
        if left is None or right is None:
            return None
        return {
            "left": left,
            "right": right,
            "left_results": queries.eval_results(conn, left_id),
            "right_results": queries.eval_results(conn, right_id),
            "dataset_runs": queries.eval_runs(conn, left["dataset"]),
            "in_force": {s["key"]: s["value"] for s in queries.query_settings(conn)},
        }

    data = lab.db.run(work)
    if data == "denied":
        return denied_eval(lab, request)
    if data is None:
        raise HTTPException(
            404, f"no evaluation runs {left_id} and {right_id} that the role {lab.db.role_label} can see"
        )
    k = min(nonnegative_int(p.get("k"), 10) or 10, 20)
    comparison = lab_runs.run_against_run(data["left_results"], data["right_results"], k=k)
    configs = {c["key"]: c for c in lab_runs.configurations([data["left"], data["right"]])}
    links = {
        c["case_id"]: (
            case_link(c["left"], data["left"], data["in_force"]),
            case_link(c["right"], data["right"], data["in_force"]),
        )
        for c in comparison["cases"]
    }
    return lab.page(
        request,
        "eval_compare.html",
        {
            "nav": "eval",
            "left": data["left"],
            "right": data["right"],
            "left_config": configs.get(data["left"]["series_key"]),
            "right_config": configs.get(data["right"]["series_key"]),
            "cmp": comparison,
            "differences": lab_runs.differences(data["left"], data["right"]),
            "links": links,
            "dataset_runs": data["dataset_runs"],
        },
    )


def case_files() -> list[Path]:
    """The case files a run may be started from without an upload: examples/eval/*.json of this checkout."""
    folder = REPO_ROOT / "examples" / "eval"
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def _setting_text(value: Any) -> str:
    """A setting's jsonb value as the text of a session setting (what set_config takes)."""
    return value if isinstance(value, str) else json.dumps(value)


def case_link(result: dict[str, Any], run: dict[str, Any], in_force: dict[str, Any]) -> str:
    """The query page asking a stored case exactly as the run asked it: its question, namespace, follow-up
    context, as_of and k, the run's mode, and every setting of the run's configuration whose value differs
    from the one in force now (for runs stored before configurations were complete: their overrides)."""
    params = run.get("params") or {}
    config = run.get("configuration") or {}
    items = [("q", result["query"])]
    namespace = result.get("namespace") if "namespace" in result else params.get("namespace")
    if namespace or params.get("namespace"):
        items.append(("namespace", namespace or params.get("namespace")))
    items.append(("mode", run["mode"]))
    items.append(("k", str(result.get("k") or params.get("k") or 10)))
    if result.get("as_of"):
        items.append(("as_of", result["as_of"]))
    if result.get("context"):
        items.append(("context", "\n".join(result["context"])))
    if config.get("complete"):
        chosen = {key: value for key, value in (config.get("settings") or {}).items() if in_force.get(key) != value}
    else:
        chosen = dict(params.get("settings") or {})
    items += [(f"set.{key}", _setting_text(value)) for key, value in sorted(chosen.items()) if key in in_force]
    return "/query?" + urlencode(items)
