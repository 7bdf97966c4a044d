"""The ``cdc`` command: one entry point, a subcommand per part of the pipeline."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from common.config import DEFAULT_CONFIG_PATH, ConfigError, load_config
from cdc.stack.process import StackError

console = Console(stderr=False)
err_console = Console(stderr=True)


class CommandError(Exception):
    """A user-facing failure: printed without a traceback, exit code 1."""


# --- stack -----------------------------------------------------------------------------

def _cmd_stack_up(args: argparse.Namespace) -> int:
    from cdc.stack.manager import stack_up
    with console.status("starting the embedded stack..."):
        info = stack_up(Path(args.state_dir), kafka_bootstrap=args.kafka_bootstrap, postgres_dsn=args.postgres_dsn,
                        on_lost_kafka=args.on_lost_kafka)
    m, k, p = info.mysql, info.kafka, info.postgres
    console.print(f"[green]stack up[/green] in {info.state_dir}")
    console.print(f"  mysql     {m['flavor']} {m['version']} at {m['host']}:{m['port']} (pid {m['pid']})")
    console.print(f"  kafka     {k['bootstrap_servers']}" + (f" (embedded Tansu, pid {k['pid']})" if k.get("embedded") else " (external)"))
    console.print("  postgres  " + (f"127.0.0.1:{p['port']} (pid {p['pid']})" if p.get("embedded") else "external DSN"))
    console.print(f"  config    {info.config_path}   (use: cdc -c {info.config_path} ...)")
    for note in info.notes:
        console.print(f"[yellow]note:[/yellow] {note}", highlight=False)
    return 0


def _cmd_stack_down(args: argparse.Namespace) -> int:
    from cdc.stack.manager import KAFKA_DOWN_NOTE, stack_down
    stopped = stack_down(Path(args.state_dir))
    console.print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    if "kafka" in stopped:
        console.print(f"[yellow]note:[/yellow] {KAFKA_DOWN_NOTE}", highlight=False)
    return 0


def _cmd_stack_status(args: argparse.Namespace) -> int:
    from cdc.stack.manager import stack_status
    report = stack_status(Path(args.state_dir))
    table = Table("part", "health", "details")
    for part, (ok, detail) in report.items():
        table.add_row(part, "[green]up[/green]" if ok else "[red]down[/red]", detail)
    console.print(table)
    return 0 if all(ok for ok, _ in report.values()) else 1


# --- pipeline commands ------------------------------------------------------------------

def _cmd_produce(args: argparse.Namespace) -> int:
    from producer.app import KafkaHistoryLost, ProducerStopped, run_producer
    from producer.binlog_source import SourceError
    from producer.offset_store import LocalOffsetCopy, OffsetStore
    cfg = load(args)
    if args.reset_offsets:
        from confluent_kafka import Producer
        from common.kafka.clients import producer_config
        store = OffsetStore(cfg.kafka, cfg.producer.name)
        store.ensure()
        store.reset(Producer(producer_config(cfg.kafka)))
        local = LocalOffsetCopy(cfg.state_dir, cfg.producer.name)
        local.remove()
        console.print(f"stored position of producer '{cfg.producer.name}' removed (Kafka, and {local.path})")
        return 0
    try:
        return run_producer(cfg, idle_exit_s=args.exit_when_idle, recover=args.recover)
    except KafkaHistoryLost as exc:
        raise CommandError(f"{exc}\n{_sinks_note(cfg)}".rstrip()) from None
    except (ProducerStopped, SourceError) as exc:
        raise CommandError(str(exc)) from None


def _sinks_note(cfg) -> str:
    """How far each configured table sink got (for messages about lost history)."""
    if not (cfg.sinks.postgres.enabled or cfg.sinks.mysql.enabled):
        return ""
    from spark_jobs.merge_job import MergeJob, sinks_note
    return sinks_note(MergeJob(cfg).settings)


def _cmd_bench_stream(args: argparse.Namespace) -> int:
    from cdc.bench import BenchError, bench_stream
    try:
        bench_stream(Path(args.state_dir), rows=args.rows, keep_running=args.keep_running,
                     profile_dir=Path(args.profile) if args.profile else None, console=console)
    except BenchError as exc:
        raise CommandError(str(exc)) from None
    return 0


def _cmd_snapshot(args: argparse.Namespace) -> int:
    """Insert a signal row (as the CDC user), like ``INSERT INTO cdc_signal ...`` would."""
    from producer.binlog_source import connect
    from contract.signals import execute_snapshot_data, send_signal
    cfg = load(args)
    if args.pause or args.resume:
        kind, data = ("pause-snapshot" if args.pause else "resume-snapshot"), {"type": "incremental"}
    elif args.stop:
        kind, data = "stop-snapshot", {"type": "incremental", **({"data-collections": args.tables} if args.tables else {})}
    else:
        if not args.tables:
            raise CommandError("name the tables to snapshot, e.g. 'cdc snapshot shop.orders'")
        kind, data = "execute-snapshot", execute_snapshot_data(args.tables, where=args.where,
                                                               surrogate_key=args.surrogate_key,
                                                               delete_missing=args.delete_missing)
    follower = None
    if args.follow and kind == "execute-snapshot":
        from cdc.progress import NotificationFollower
        follower = NotificationFollower(cfg)
    try:
        conn = connect(cfg.source)
    except Exception as exc:  # noqa: BLE001 - shown to the user
        raise CommandError(f"cannot connect to the source as {cfg.source.user}: {exc}") from None
    try:
        sid = send_signal(conn, cfg.source.signal_table, kind, data)
    finally:
        conn.close()
    console.print(f"signal {sid} ({kind}) inserted into {cfg.source.signal_table}")
    if follower is None:
        return 0
    try:
        result = follower.follow(console, sid, args.timeout)
    finally:
        follower.close()
    if result.refused:
        raise CommandError(f"the producer refused the signal: {result.refused}")
    if result.done:
        console.print(f"done: {', '.join(result.done)}")
    if result.aborted:
        console.print(f"[yellow]aborted:[/yellow] {', '.join(result.aborted)}")
    if result.timed_out:
        raise CommandError("timed out before every table was done (the snapshot goes on)")
    return 0


def _cmd_chaos(args: argparse.Namespace) -> int:
    """A long chaos run on its own embedded stack."""
    import pymysql

    from cdc.chaos import ChaosError, run_chaos
    from common.config import load_config
    from cdc.stack.manager import restart_mysql, stack_down, stack_up
    logging.getLogger("py4j").setLevel(logging.WARNING)
    state = Path(args.state_dir)
    info = stack_up(state)
    cfg = load_config(info.config_path)

    def admin():
        m = info.mysql
        return pymysql.connect(host=m["host"], port=m["port"], user=m["admin_user"], password=m["admin_password"],
                               charset="utf8mb4", autocommit=True)
    try:
        counts = run_chaos(cfg, admin=admin, restart_source=lambda: restart_mysql(info.state_dir, down_s=1.0),
                           seed=args.seed, rows=args.rows, duration=args.duration,
                           producer_kills=args.producer_kills, job_kills=args.job_kills,
                           work_dir=info.state_dir / f"run-{args.seed}-{int(__import__('time').time())}",
                           console=console)
    except ChaosError as exc:
        raise CommandError(str(exc)) from None
    finally:
        if not args.keep_running:
            stack_down(info.state_dir)
    return 0 if counts["verify_equal"] and counts["clean_changelog_duplicates"] == 0 else 1


def _cmd_merge(args: argparse.Namespace) -> int:
    from spark_jobs.merge_job import MergeDataLoss, run_merge
    cfg = load(args)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        return run_merge(cfg, available_now=args.available_now)
    except MergeDataLoss as exc:
        raise CommandError(f"the merge job stopped: {exc}") from None


def _cmd_bench_report(args: argparse.Namespace) -> int:
    from cdc.bench import BenchError
    from cdc.bench_report import bench_report
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        bench_report(Path(args.out), Path(args.state_dir), stream_rows=args.stream_rows,
                     snapshot_rows=args.snapshot_rows, merge_events=args.merge_events, console=console)
    except BenchError as exc:
        raise CommandError(str(exc)) from None
    return 0


def _cmd_bench_merge(args: argparse.Namespace) -> int:
    from cdc.bench import BenchError
    from cdc.bench_merge import bench_merge
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        bench_merge(Path(args.state_dir), events=args.events, rate=args.rate, seconds=args.seconds,
                    keep_running=args.keep_running, console=console)
    except BenchError as exc:
        raise CommandError(str(exc)) from None
    return 0


def _cmd_bench_snapshot(args: argparse.Namespace) -> int:
    from cdc.bench import BenchError
    from cdc.bench_snapshot import bench_snapshot
    try:
        bench_snapshot(Path(args.state_dir), rows=args.rows, chunk_size=args.chunk_size, parallelism=args.parallelism,
                       writes_per_s=args.writes_per_s, keep_running=args.keep_running, console=console)
    except BenchError as exc:
        raise CommandError(str(exc)) from None
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    """Producer position, lag and rate: stored offsets (Kafka) and the live status file."""
    import json
    import time
    from producer.offset_store import LocalOffsetCopy, OffsetStore, lost_history
    cfg = load(args)
    table = Table("what", "value")
    stored = OffsetStore(cfg.kafka, cfg.producer.name).load()
    if stored:
        r = stored["resume"]
        age = time.time() - stored.get("ts_ms", 0) / 1000
        table.add_row("stored position", f"{r['file']}:{r['pos']} (last change {r.get('last')})")
        table.add_row("last commit", f"{age:.1f}s ago")
    else:
        table.add_row("stored position", "none (the producer has not committed yet)")
    local = LocalOffsetCopy(cfg.state_dir, cfg.producer.name)
    kept = local.load()
    lost = lost_history(stored, kept)
    if lost is not None:
        table.add_row("[red]Kafka history[/red]", f"[red]lost[/red]: {lost}; the position kept in {local.path} is "
                      f"{kept['resume']['file']}:{kept['resume']['pos']} (cdc produce says how to recover)")
    status_file = Path(cfg.state_dir) / "producer-status.json"
    if status_file.exists():
        st = json.loads(status_file.read_text())
        fresh = time.time() - st.get("updated_at", 0) < 30
        table.add_row("producer", f"pid {st['pid']}, " + ("running" if fresh else "no update for 30s+"))
        table.add_row("events", f"{st['events_total']:,} ({st['events_per_second']:.0f}/s)")
        table.add_row("seconds behind source", f"{st['seconds_behind_source']:.1f}")
    else:
        st = {}
        table.add_row("producer", f"no status file in {cfg.state_dir} (not running here)")
    console.print(table)
    merge_file = Path(cfg.state_dir) / "merge-status.json"
    if merge_file.exists():
        ms = json.loads(merge_file.read_text())
        lb = ms.get("last_batch", {})
        fresh = time.time() - ms.get("updated_at", 0) < 60
        mt = Table("merge job", "value")
        mt.add_row("job", f"pid {ms['pid']}, " + ("running" if fresh else "no batch for 60s+"))
        mt.add_row("last batch", f"#{ms['batch_id']}: {lb.get('input', 0):,} records, {lb.get('rows_per_second', 0):,.0f}/s, "
                                 f"{lb.get('dropped', 0)} chunk rows dropped, {lb.get('dead', 0)} dead letters")
        latency = {k: lb.get(f"latency_{k}_ms") for k in ("p50", "p99")}
        mt.add_row("latency", ", ".join(f"{k} {v:,.0f} ms" if v is not None else f"{k} -" for k, v in latency.items()))
        t = ms.get("totals", {})
        mt.add_row("totals", ", ".join(f"{k} {v:,}" for k, v in t.items()))
        console.print(mt)
    snap = st.get("snapshot") or (stored or {}).get("snapshot")
    if snap and snap.get("snapshot_id"):
        from cdc.progress import draw_status_bars
        if "tables" not in snap:  # the stored form
            snap = {"paused": snap.get("paused"), "tables": [
                {"table": j["table"], "rows": j.get("rows", 0), "estimated": j.get("estimated", 0)}
                for j in snap.get("jobs", [])]}
        console.print(f"snapshot {snap.get('snapshot_id', '')}" + (" (paused)" if snap.get("paused") else ""))
        draw_status_bars(console, snap)
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    """Exit 0 only when every table equals every target."""
    import json
    from cdc.verify import VerifyError, print_report, verify
    cfg = load(args)
    try:
        if args.json:
            report = verify(cfg, args.tables or None, changelog=args.changelog, chunk_size=args.chunk_size,
                            samples=args.samples)
        else:
            with console.status("verifying...") as status:
                report = verify(cfg, args.tables or None, changelog=args.changelog, chunk_size=args.chunk_size,
                                samples=args.samples, progress=lambda msg: status.update(f"verifying {msg}"))
    except VerifyError as exc:
        raise CommandError(str(exc)) from None
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n")
    else:
        print_report(report, console)
    return 0 if report.equal else 1


def _cmd_demo(args: argparse.Namespace) -> int:
    from cdc.demo import run_demo
    return run_demo(Path(args.state_dir), keep_running=args.keep_running)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cdc", description="MySQL change data capture into Kafka, merged by Spark")
    parser.add_argument("-c", "--config", default=str(DEFAULT_CONFIG_PATH),
                        help="configuration file (default ./cdc.yaml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    stack = sub.add_parser("stack", help="the embedded stack: MySQL-compatible server, Kafka broker, PostgreSQL")
    stack_sub = stack.add_subparsers(dest="stack_command", required=True, metavar="ACTION")
    for name, fn, help_ in (("up", _cmd_stack_up, "start (idempotent)"), ("down", _cmd_stack_down, "stop what up started"),
                            ("status", _cmd_stack_status, "health of each part")):
        p = stack_sub.add_parser(name, help=help_)
        p.add_argument("--state-dir", default=".cdc/stack", help="where data, logs, stack.json and cdc.yaml live")
        p.set_defaults(func=fn)
        if name == "up":
            p.add_argument("--kafka-bootstrap", help="use this external Kafka instead of the embedded broker")
            p.add_argument("--postgres-dsn", help="use this existing PostgreSQL instead of a private one")
            p.add_argument("--on-lost-kafka", choices=["recover", "refuse"], default="recover",
                           help="when the embedded broker must be started again (its topics are gone) and the "
                                "state directory holds a merge checkpoint or producer positions: reset them and "
                                "have the producer recover by snapshot (default), or refuse to start")

    demo = sub.add_parser("demo", help="run the pipeline on demo data on the embedded stack")
    demo.add_argument("--state-dir", default=".cdc/demo")
    demo.add_argument("--keep-running", action="store_true", help="leave the stack running at the end")
    demo.set_defaults(func=_cmd_demo)

    produce = sub.add_parser("produce", help="stream binlog row changes into Kafka")
    produce.add_argument("--reset-offsets", action="store_true",
                         help="forget the stored position (the next start follows producer.startup)")
    produce.add_argument("--exit-when-idle", type=float, default=None, metavar="SECONDS",
                         help="stop after this many seconds without binlog events")
    produce.add_argument("--recover", choices=["resume", "snapshot"], default=None,
                         help="when Kafka lost this producer's history: re-publish from the position kept in the "
                              "state directory (resume), and also snapshot every captured table again (snapshot)")
    produce.set_defaults(func=_cmd_produce)

    bench = sub.add_parser("bench", help="benchmarks on the embedded stack")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    bench_stream_p = bench_sub.add_parser(
        "stream", help="binlog -> Kafka: python-mysql-replication vs the producer vs mariadb-binlog")
    bench_stream_p.add_argument("--rows", type=int, default=500_000, help="row changes to generate (default 500000)")
    bench_stream_p.add_argument("--state-dir", default=".cdc/bench", help="the benchmark's own stack (default .cdc/bench)")
    bench_stream_p.add_argument("--keep-running", action="store_true", help="leave the stack running at the end")
    bench_stream_p.add_argument("--profile", metavar="DIR", help="write a cProfile of each producer run into DIR")
    bench_stream_p.set_defaults(func=_cmd_bench_stream)

    snap = sub.add_parser("snapshot", help="trigger, pause, resume or stop an incremental snapshot (a signal row)")
    snap.add_argument("tables", nargs="*", metavar="DB.TABLE",
                      help="tables to snapshot (names or regular expressions, as in the signal's data-collections)")
    snap.add_argument("--where", metavar="FILTER", help="only rows matching this predicate (additional-conditions)")
    snap.add_argument("--surrogate-key", metavar="COLUMN", help="chunk on this unique column instead of the primary key")
    snap.add_argument("--delete-missing", action="store_true",
                      help="once a table is read, the sinks delete the rows it did not find (rows deleted at the "
                           "source while their changes were lost)")
    action = snap.add_mutually_exclusive_group()
    action.add_argument("--stop", action="store_true", help="stop the running snapshot (of TABLES, or all)")
    action.add_argument("--pause", action="store_true", help="pause the running snapshot")
    action.add_argument("--resume", action="store_true", help="resume a paused snapshot")
    snap.add_argument("--follow", action="store_true", help="draw progress bars until the tables are done")
    snap.add_argument("--timeout", type=float, default=None, help="with --follow: give up after SECONDS")
    snap.set_defaults(func=_cmd_snapshot)

    bench_snap_p = bench_sub.add_parser(
        "snapshot", help="incremental snapshot of a table: pymysql keyset scan vs the producer vs mariadb-dump")
    bench_snap_p.add_argument("--rows", type=int, default=1_000_000, help="rows in the table (default 1000000)")
    bench_snap_p.add_argument("--chunk-size", type=int, default=8192)
    bench_snap_p.add_argument("--parallelism", type=int, default=1, help="chunk readers")
    bench_snap_p.add_argument("--writes-per-s", type=int, default=1000,
                              help="writes per second during the second run (0: skip it)")
    bench_snap_p.add_argument("--state-dir", default=".cdc/bench")
    bench_snap_p.add_argument("--keep-running", action="store_true")
    bench_snap_p.set_defaults(func=_cmd_bench_snapshot)

    merge = sub.add_parser("merge", help="run the Spark merge job: DBLog dedup into the clean changelog and sinks")
    merge.add_argument("--available-now", action="store_true",
                       help="process what is in Kafka now, then exit (default: run until stopped)")
    merge.set_defaults(func=_cmd_merge)

    bench_merge_p = bench_sub.add_parser("merge", help="the Spark merge job into PostgreSQL: throughput and latency")
    bench_merge_p.add_argument("--events", type=int, default=1_000_000, help="change events in Kafka (default 1000000)")
    bench_merge_p.add_argument("--rate", type=int, default=5000, help="steady events/s for the latency run (0: skip)")
    bench_merge_p.add_argument("--seconds", type=float, default=30.0, help="length of the latency run")
    bench_merge_p.add_argument("--state-dir", default=".cdc/bench")
    bench_merge_p.add_argument("--keep-running", action="store_true")
    bench_merge_p.set_defaults(func=_cmd_bench_merge)

    bench_report_p = bench_sub.add_parser("report", help="stream, snapshot and merge benchmarks into docs/benchmarks.md")
    bench_report_p.add_argument("--out", default="docs/benchmarks.md")
    bench_report_p.add_argument("--stream-rows", type=int, default=500_000)
    bench_report_p.add_argument("--snapshot-rows", type=int, default=1_000_000)
    bench_report_p.add_argument("--merge-events", type=int, default=1_000_000)
    bench_report_p.add_argument("--state-dir", default=".cdc/bench")
    bench_report_p.set_defaults(func=_cmd_bench_report)

    chaos = sub.add_parser("chaos", help="the pipeline under load with processes killed; must end equal (make chaos)")
    chaos.add_argument("--seed", type=int, default=1)
    chaos.add_argument("--rows", type=int, default=20_000, help="rows per table before the producer starts")
    chaos.add_argument("--duration", type=float, default=180.0, help="seconds over which the kills are spread")
    chaos.add_argument("--producer-kills", type=int, default=20)
    chaos.add_argument("--job-kills", type=int, default=8)
    chaos.add_argument("--state-dir", default=".cdc/chaos")
    chaos.add_argument("--keep-running", action="store_true")
    chaos.set_defaults(func=_cmd_chaos)

    status = sub.add_parser("status", help="producer position, lag and rate")
    status.set_defaults(func=_cmd_status)

    ver = sub.add_parser("verify", help="compare source tables with the sinks (chunk checksums, then row by row)")
    ver.add_argument("tables", nargs="*", metavar="DB.TABLE",
                     help="tables to verify (names or regular expressions; default: every captured table)")
    ver.add_argument("--changelog", action="store_true",
                     help="also replay each clean changelog topic (memory proportional to the table)")
    ver.add_argument("--chunk-size", type=int, default=10_000, help="rows per checksum chunk (default 10000)")
    ver.add_argument("--samples", type=int, default=5, help="differing rows shown per kind (default 5)")
    ver.add_argument("--json", action="store_true", help="print the report as JSON")
    ver.set_defaults(func=_cmd_verify)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("pymysqlreplication", "py4j"):  # py4j logs every gateway connection at INFO
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return args.func(args)
    except (CommandError, ConfigError, StackError) as exc:
        err_console.print(f"[red]error:[/red] {exc}", markup=True, highlight=False, soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        return 130


def load(args: argparse.Namespace):
    """The configuration named by ``-c`` (for subcommands)."""
    return load_config(args.config)


if __name__ == "__main__":
    sys.exit(main())
