"""`pgkb status` and `pgkb doctor`: server, extensions, migrations, models and ingest state as
one dict, and the health checks of kb.health() with the exit code a script can act on."""

from __future__ import annotations

from .db import connect

HEALTH_EXIT = {"ok": 0, "skipped": 0, "degraded": 1, "failed": 2}


def health(dsn: str) -> list[dict]:
    """kb.health()'s rows: check_name, state (ok, degraded, failed, skipped), detail, fix."""
    with connect(dsn) as conn:
        return [dict(r) for r in conn.execute("SELECT * FROM kb.health()")]


def health_exit_code(checks: list[dict]) -> int:
    """0 when every check is ok (or skipped), 1 when some are degraded, 2 when any failed."""
    return max((HEALTH_EXIT[c["state"]] for c in checks), default=0)


def health_lines(checks: list[dict]) -> list[str]:
    """One line per check: state, name, detail and, when something is wrong, the fix."""
    return [
        f"{c['state']:<8} {c['check_name']}: {c['detail']}" + (f"  -> {c['fix']}" if c["fix"] else "") for c in checks
    ]


def collect(dsn: str) -> dict:
    with connect(dsn) as conn:
        server = conn.execute("SELECT current_setting('server_version') AS v").fetchone()["v"]
        extensions = {
            r["extname"]: r["extversion"]
            for r in conn.execute("SELECT extname, extversion FROM pg_extension ORDER BY extname")
        }
        has_kb = conn.execute("SELECT to_regclass('kb.schema_migrations') IS NOT NULL AS ok").fetchone()["ok"]
        status: dict = {"server_version": server, "extensions": extensions, "migrations": [], "models": []}
        if not has_kb:
            return status
        status["migrations"] = [
            {"version": r["version"], "filename": r["filename"], "applied_at": r["applied_at"].isoformat()}
            for r in conn.execute("SELECT version, filename, applied_at FROM kb.schema_migrations ORDER BY version")
        ]
        if conn.execute("SELECT to_regclass('kb.model_readiness') IS NOT NULL AS ok").fetchone()["ok"]:
            for r in conn.execute("SELECT * FROM kb.model_readiness ORDER BY active DESC, model"):
                status["models"].append(
                    {
                        "model": r["model"],
                        "provider": r["provider"],
                        "dimensions": r["dimensions"],
                        "active": r["active"],
                        "embedded": r["embedded"],
                        "pending": r["pending"],
                        "failed": r["failed"],
                        "stale": r["stale"],
                        "neural_ready": bool(r["active"] and r["embedded"] > 0),
                    }
                )
            active = next((m for m in status["models"] if m["active"]), None)
            status["neural_ready"] = bool(active and active["neural_ready"])
            status["model"] = active["model"] if active else None
            status["dimensions"] = active["dimensions"] if active else None
            for key in ("embedded", "pending", "failed"):
                status[key] = active[key] if active else 0
            # vectors kept for models that are not active: never used for retrieval
            status["stale"] = sum(m["stale"] for m in status["models"])
            status["health"] = [dict(r) for r in conn.execute("SELECT * FROM kb.health()")]
            status["namespaces"] = [
                {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in r.items()}
                for r in conn.execute("SELECT * FROM kb.ingest_status ORDER BY namespace")
            ]
        return status
