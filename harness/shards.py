"""`pgkb shards`: set up and feed a shard coordinator (sql/shards/; docs/SCALING.md,
"Shards"). Thin: the coordinator database keeps the shards and the namespace map and does the
routing; this module installs its SQL, records shards and namespaces, and sends a folder's
documents to `kb_shard.upsert_document`, which writes each on the shard of its namespace."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import Jsonb

from . import cluster, loader
from .config import load_settings
from .db import connect, redacted
from .migrate import MigrationError, checksum, migrate, migration_files, run_file

COORDINATOR_DIR = Path(__file__).resolve().parent.parent / "sql" / "shards"


def init(dsn: str) -> None:
    """Install the coordinator's objects (plproxy, schema kb_shard) in a migrated pgkb database: its
    migrations (sql/shards/migrations/) once each, recorded in kb_shard.schema_migrations, then its
    code (sql/shards/NN_*.sql), re-created; running it again changes nothing."""
    migrations = migration_files(COORDINATOR_DIR / "migrations")
    with connect(dsn) as conn, conn.transaction():
        conn.execute("CREATE SCHEMA IF NOT EXISTS kb_shard")
        conn.execute(
            """CREATE TABLE IF NOT EXISTS kb_shard.schema_migrations (
                   filename text PRIMARY KEY,
                   checksum text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        applied = {
            r["filename"]: r["checksum"]
            for r in conn.execute("SELECT filename, checksum FROM kb_shard.schema_migrations").fetchall()
        }
        for path in migrations:
            digest = checksum(path)
            if path.name in applied:
                if applied[path.name] != digest:
                    raise MigrationError(
                        f"coordinator migration {path} was edited after it was applied: add a new migration instead"
                    )
                continue
            run_file(conn, path, f"coordinator migration {path.name}")
            conn.execute(
                "INSERT INTO kb_shard.schema_migrations (filename, checksum) VALUES (%s, %s)", (path.name, digest)
            )
        for path in sorted(COORDINATOR_DIR.glob("[0-9]*.sql")):
            run_file(conn, path, f"sql/shards/{path.name}")


def add(dsn: str, name: str, connect_string: str, user: str | None = None) -> int:
    """Record a shard (the next shard number), re-create the PL/Proxy server and open the shard's
    doors to the role the coordinator connects as (`open_doors`); its shard number."""
    with connect(dsn) as conn, conn.transaction():
        row = conn.execute(
            """INSERT INTO kb_shard.shards (shard_no, name, connect_string)
               SELECT coalesce(max(shard_no) + 1, 0), %s, %s FROM kb_shard.shards RETURNING shard_no""",
            (name, connect_string),
        ).fetchone()
        conn.execute("SELECT kb_shard.configure(%s)", (user,))
    open_doors(shard_dsn(dsn, connect_string), user, name)
    return row["shard_no"]


def shard_dsn(coordinator_dsn: str, connect_string: str) -> str:
    """The shard's connect string as this command reaches it: with the coordinator DSN's user and
    password where the connect string names none."""
    given = conninfo_to_dict(connect_string)
    caller = conninfo_to_dict(coordinator_dsn)
    extra = {k: caller[k] for k in ("user", "password") if k in caller and k not in given}
    return make_conninfo(connect_string, **extra)


def open_doors(shard: str, user: str | None, name: str = "the shard") -> list[str]:
    """Make a database a shard for a coordinator connecting as `user` (None: as each caller's own
    role): kb.open_shard_doors there, the owner's to run. Until then no role but the owner may call
    the shard doors. The roles that may call them."""
    try:
        with connect(shard) as conn:
            return conn.execute("SELECT kb.open_shard_doors(%s) AS roles", (user,)).fetchone()["roles"]
    except psycopg.Error as e:
        raise RuntimeError(
            f"could not open the shard doors of {name} ({redacted(shard)}): {e}; run "
            f"`SELECT kb.open_shard_doors({'NULL' if user is None else repr(user)})` there as the database's owner"
        ) from e


def map_namespace(dsn: str, namespace: str, shard: str) -> None:
    """Place a namespace on a shard (by name). Moving a namespace that has documents is not done
    here: its documents would stay on the old shard."""
    with connect(dsn) as conn:
        found = conn.execute(
            """INSERT INTO kb_shard.namespaces (namespace, shard_no)
               SELECT %s, s.shard_no FROM kb_shard.shards AS s WHERE s.name = %s
               ON CONFLICT (namespace) DO NOTHING RETURNING shard_no""",
            (namespace, shard),
        ).fetchone()
        if found is None:
            exists = conn.execute("SELECT 1 FROM kb_shard.shards WHERE name = %s", (shard,)).fetchone()
            if exists is None:
                raise RuntimeError(f"no shard named {shard!r} (pgkb shards list)")
            raise RuntimeError(f"namespace {namespace!r} is already mapped (kb_shard.namespaces)")


def sync(dsn: str) -> dict:
    """Refresh every shard's statistics, then copy their language statistics and glossaries to
    the coordinator (what a retrieval over all namespaces pools)."""
    with connect(dsn) as conn:
        conn.execute("SELECT count(*) FROM kb_shard.refresh_statistics_on_shards()")
        return conn.execute("SELECT kb_shard.sync_statistics() AS copied").fetchone()["copied"]


def ingest(dsn: str, paths: list[str], namespace: str | None = None) -> loader.Summary:
    """Load folders of Markdown/text files through the coordinator: each document is written on the
    shard of its namespace (front matter, or `namespace`); a document whose namespace is not mapped
    is reported as failed. Then the statistics are refreshed and synced (`sync`)."""
    summary = loader.Summary()
    with connect(dsn) as conn:
        for root_arg in paths:
            root = Path(root_arg).resolve()
            for path, source in loader.discover(root):
                if loader.sends(path):
                    summary.failed.append({"file": str(path), "error": f"{path}: binary files are not routed yet"})
                    continue
                try:
                    doc = loader.read_document(path, source, namespace)
                except (loader.DocumentError, OSError) as exc:
                    summary.failed.append({"file": str(path), "error": str(exc)})
                    continue
                document = dict(doc.__dict__, origin=str(root))
                try:
                    row = conn.execute(
                        "SELECT * FROM kb_shard.upsert_document(%s)",
                        (Jsonb(json.loads(json.dumps(document, default=str))),),
                    ).fetchone()
                except psycopg.Error as exc:
                    detail = exc.diag.message_primary or str(exc)
                    summary.failed.append({"file": str(path), "error": f"{path}: rejected: {detail}"})
                    continue
                (summary.skipped if row is None else summary.synced).append(source)
    sync(dsn)
    return summary


def status(dsn: str) -> dict:
    """The shards and which namespaces each holds."""
    with connect(dsn) as conn:
        shards = conn.execute(
            """SELECT s.shard_no, s.name, s.connect_string,
                      coalesce(array_agg(n.namespace ORDER BY n.namespace) FILTER (WHERE n.namespace IS NOT NULL),
                               '{}') AS namespaces
               FROM kb_shard.shards AS s LEFT JOIN kb_shard.namespaces AS n USING (shard_no)
               GROUP BY s.shard_no, s.name, s.connect_string ORDER BY s.shard_no"""
        ).fetchall()
    return {"shards": shards}


@contextmanager
def local_sharded_corpus(
    corpus: Path, namespaces: Sequence[str], prepare: Callable[[str], None], prefix: str = "pgkb-"
) -> Iterator[dict]:
    """Throwaway clusters on this machine (harness.cluster: fresh folders, free ports) holding one
    corpus twice: sharded, namespace i on shard i (one cluster per namespace, fed through the
    coordinator's routed ingest), and on one node, the reference (`pgkb_reference`, fed by the
    folder loader in the same order), which shares a fourth cluster with the coordinator (`pgkb`).
    Every database is migrated and then given to `prepare(dsn)` (e.g. to choose its model) before
    anything is loaded. Yields {"coordinator": dsn, "reference": dsn, "shards": [Settings],
    "documents": n}; the clusters are stopped and removed on exit, also on error. For tests and
    benchmarks that compare a sharded corpus with one node."""
    made = [cluster.throwaway_settings(f"{prefix}shard{i}-") for i in range(len(namespaces))]
    hub = cluster.throwaway_settings(f"{prefix}coordinator-")
    try:
        for settings in [*made, hub]:
            cluster.init(settings)
            cluster.start(settings)
            cluster.ensure_database(settings)
        cluster.ensure_database(hub, "pgkb_reference")
        coordinator = hub.embedded_dsn
        reference = coordinator.rsplit("/", 1)[0] + "/pgkb_reference"
        for dsn, settings in [*((s.embedded_dsn, s) for s in made), (coordinator, hub), (reference, hub)]:
            migrate(dsn, settings)
            prepare(dsn)
        init(coordinator)
        for i, settings in enumerate(made):
            add(coordinator, f"shard{i}", f"host=127.0.0.1 port={settings.port} dbname=pgkb", user="postgres")
        for i, namespace in enumerate(namespaces):
            map_namespace(coordinator, namespace, f"shard{i}")
        one = loader.ingest(reference, [str(corpus)], progress=False)
        if one.failed:
            raise RuntimeError(f"the reference's ingest failed: {one.failed}")
        with connect(reference) as conn:
            conn.execute("SELECT count(*) FROM kb.refresh_language_statistics()")
        routed = ingest(coordinator, [str(corpus)])
        if routed.failed or len(routed.synced) != len(one.synced):
            raise RuntimeError(f"routed ingest: {len(routed.synced)} of {len(one.synced)} documents, {routed.failed}")
        yield {"coordinator": coordinator, "reference": reference, "shards": made, "documents": len(one.synced)}
    finally:
        for settings in [hub, *made]:
            cluster.destroy(settings)
            shutil.rmtree(settings.home, ignore_errors=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="shards_command", required=True, help="what to do on the coordinator")
    sub.add_parser("init", help="install the coordinator (plproxy, schema kb_shard) in the migrated database")
    p = sub.add_parser("add", help="add a shard: a migrated pgkb database")
    p.add_argument("name", help="the shard's name, e.g. shard1")
    p.add_argument("connect", help="libpq connect string of the shard, e.g. 'host=10.0.0.5 port=5432 dbname=pgkb'")
    p.add_argument("--user", help="the role the coordinator connects as (default: each caller's own)")
    p = sub.add_parser("map", help="place a namespace on a shard")
    p.add_argument("namespace", help="the namespace, e.g. policies")
    p.add_argument("shard", help="the shard's name, as given to pgkb shards add, e.g. shard_a")
    p = sub.add_parser("ingest", help="load folders through the coordinator, routed by namespace")
    p.add_argument("paths", nargs="+", help="folders or files, as for pgkb ingest, e.g. examples/corpus")
    p.add_argument("--namespace", help="the namespace of every document (default: front matter's, else 'default')")
    sub.add_parser("sync", help="refresh the shards' statistics and copy them to the coordinator")
    sub.add_parser("list", help="the shards and their namespaces")


def main(args) -> int:
    dsn = load_settings().dsn
    if args.shards_command == "init":
        init(dsn)
        print("coordinator installed", file=sys.stderr)
    elif args.shards_command == "add":
        print(json.dumps({"shard_no": add(dsn, args.name, args.connect, args.user)}))
    elif args.shards_command == "map":
        map_namespace(dsn, args.namespace, args.shard)
    elif args.shards_command == "ingest":
        summary = ingest(dsn, args.paths, args.namespace)
        print(json.dumps(summary.as_dict(), ensure_ascii=False, indent=2))
        return 1 if summary.failed else 0
    elif args.shards_command == "sync":
        print(json.dumps(sync(dsn)))
    else:
        print(json.dumps(status(dsn), ensure_ascii=False, indent=2))
    return 0
