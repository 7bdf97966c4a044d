"""The ``cdc`` command: one entry point, a subcommand per part of the pipeline.

A command that cannot do what was asked raises a :class:`common.errors.CDCError` whose
message says why and what to do; :func:`main` is the one place that catches them: it prints
the message without a traceback and exits 1.

Each command owns its arguments and handler: an ``add_parser`` function that adds its parser
(its options, their defaults and help, and its handler as ``func``).  :func:`build_parser`
registers them.  ``cdc stack`` (:mod:`cdc.stack.command`), ``cdc snapshot``
(:mod:`cdc.signal_sender`), ``cdc status`` (:mod:`cdc.status`), ``cdc route``
(:mod:`cdc.route_reset`) and the benchmarks ``stream``, ``snapshot`` and ``broker``
(:mod:`cdc.bench.stream`, :mod:`cdc.bench.snapshot`, :mod:`cdc.bench.broker`) keep theirs in
their own modules; the other commands' are still here, as a parser function each.  What
they share (the console, ``-c``'s configuration, ``--source``): :mod:`cdc.cli_common`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import pymysql
from confluent_kafka import Producer
from rich.console import Console
from rich.table import Table

# (the commands of the merge job's side -- Spark, pyarrow, PostgreSQL's client -- import them
# where they run: `cdc produce` and `cdc snapshot` load none of them, 75 MB less per producer)
from cdc import route_reset, signal_sender
from cdc import status as status_command
from cdc.bench import broker as broker_bench
from cdc.bench import snapshot as snapshot_bench
from cdc.bench import stream as stream_bench
from cdc.bench.race_settings import OLTP_ROWS
from cdc.broker_chaos import BrokerChaos
from cdc.cli_common import bench_console, console, load, source_option
from cdc.errors import CommandError
from cdc.stack import command as stack_command
from cdc.stack.kafka_broker import EmbeddedKafka
from cdc.stack.manager import record_kafka, restart_mysql, stack_up
from common import logs
from common.config import COMPRESSIONS, DEFAULT_CONFIG_PATH, load_config
from common.errors import CDCError
from common.kafka.clients import producer_config
from producer.app import run_producer
from producer.errors import KafkaHistoryLost
from producer.offset_store import LocalOffsetCopy, OffsetStore

err_console = Console(stderr=True)


# --- pipeline commands ------------------------------------------------------------------

def _cmd_produce(args: argparse.Namespace) -> int:
    cfg = load(args).for_source(args.source)
    if args.reset_offsets:
        store = OffsetStore(cfg.kafka, cfg.producer.name)
        store.ensure()
        store.reset(Producer(producer_config(cfg.kafka)))
        local = LocalOffsetCopy(cfg.state_dir, cfg.producer.name)
        local.remove()
        console.print(f"stored position of producer '{cfg.producer.name}' removed (Kafka, and {local.path})")
        return 0
    try:
        return run_producer(cfg, idle_exit_s=args.exit_when_idle, recover=args.recover)
    except KafkaHistoryLost as exc:  # said with how far the sinks got, which the producer cannot see
        raise CommandError(f"{exc}\n{_sinks_note(cfg)}".rstrip()) from None


def _sinks_note(cfg) -> str:
    """How far each configured table sink got (for messages about lost history)."""
    from spark_jobs.planning.data_loss_guard import sinks_note
    from spark_jobs.merge_job import MergeJob
    if not (cfg.sinks.postgres.enabled or cfg.sinks.mysql.enabled):
        return ""
    return sinks_note(MergeJob(cfg).settings)


def _cmd_chaos(args: argparse.Namespace) -> int:
    """A long chaos run on its own embedded stack."""
    import cdc.chaos as chaos
    import cdc.demo as demo
    state = Path(args.state_dir or (".cdc/chaos-mysql" if args.flavor == "mysql" else ".cdc/chaos"))
    info = stack_up(state, brokers=args.brokers, flavor=args.flavor)
    cfg = load_config(info.config_path)
    brokers = None
    if len(info.kafka.get("nodes") or []) > 1:  # nodes killed and shut down too
        brokers = BrokerChaos(EmbeddedKafka(info.state_dir, len(info.kafka["nodes"])), info.kafka,
                              on_change=lambda kafka: record_kafka(info.state_dir, kafka))

    def admin():
        m = info.mysql
        return pymysql.connect(host=m["host"], port=m["port"], user=m["admin_user"], password=m["admin_password"],
                               charset="utf8mb4", autocommit=True)
    try:
        counts = chaos.run_chaos(cfg, admin=admin, restart_source=lambda: restart_mysql(info.state_dir, down_s=1.0),
                                 seed=args.seed, rows=args.rows, duration=args.duration,
                                 producer_kills=args.producer_kills, job_kills=args.job_kills,
                                 work_dir=info.state_dir / f"run-{args.seed}-{int(time.time())}", console=console,
                                 read_only=args.read_only, brokers=brokers)
    finally:
        if not args.keep_running:
            demo.leave_stack(info, False, console)  # (the Spark session first: its workers keep Kafka clients)
    return 0 if chaos.passed(counts, brokers) else 1


def _cmd_merge(args: argparse.Namespace) -> int:
    from spark_jobs.merge_job import run_merge
    cfg = load(args)
    return run_merge(cfg, available_now=args.available_now)


def _cmd_bench_report(args: argparse.Namespace) -> int:
    from cdc.bench.report import bench_report
    bench_report(Path(args.out), Path(args.state_dir), stream_rows=args.stream_rows,
                 snapshot_rows=args.snapshot_rows, merge_events=args.merge_events, console=console)
    return 0


def _cmd_bench_race(args: argparse.Namespace) -> int:
    from cdc.bench.report import bench_race
    bench_race(Path(args.out), Path(args.state_dir), stream_rows=args.stream_rows, snapshot_rows=args.snapshot_rows,
               stream_runs=args.stream_runs, snapshot_runs=args.snapshot_runs,
               chunk_sizes=tuple(int(c) for c in args.chunk_sizes.split(",") if c), rounds=args.rounds,
               debezium_defaults=args.debezium_defaults, heap=args.debezium_heap,
               json_out=Path(args.json_out) if args.json_out else None,
               stream_json=Path(args.stream_json) if args.stream_json else None,
               snapshot_json=Path(args.snapshot_json) if args.snapshot_json else None,
               oltp_rows=args.oltp_rows, oltp_json=Path(args.oltp_json) if args.oltp_json else None, console=console)
    return 0


def _cmd_bench_peers(args: argparse.Namespace) -> int:
    from cdc.bench.peers_race import bench_peers, parse_peers
    from cdc.bench.peers_report import write_peers_section
    try:
        parallelisms = tuple(int(p) for p in args.parallelisms.split(",") if p.strip())
    except ValueError:
        raise SystemExit(f"cdc bench peers: --parallelisms takes numbers, not {args.parallelisms!r}") from None
    result = bench_peers(Path(args.state_dir), stream_rows=args.stream_rows, oltp_rows=args.oltp_rows,
                         snapshot_rows=args.snapshot_rows, chunk_size=args.chunk_size, rounds=args.rounds,
                         peers=parse_peers(args.peers), parallelisms=parallelisms, heap=args.heap,
                         keep_running=args.keep_running, compression=args.compression, console=console)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2, default=str))
    if args.out:
        write_peers_section(Path(args.out), result)
        console.print(f"written to {args.out}")
    return 0


def _cmd_bench_sinks(args: argparse.Namespace) -> int:
    from cdc.bench.sink_race import bench_sinks, write_sinks_section
    result = bench_sinks(Path(args.state_dir), events=args.events, rate=args.rate, seconds=args.seconds,
                         rounds=args.rounds, partitions=args.partitions, tasks=args.tasks, heap=args.heap,
                         keep_running=args.keep_running, console=console)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2, default=str))
    if args.out:
        write_sinks_section(Path(args.out), result)
        console.print(f"written to {args.out}")
    return 0


def _lake_engines(text: str) -> str:
    engines = [e.strip() for e in text.split(",") if e.strip()]
    if not engines or any(e not in ("driver", "spark") for e in engines):
        raise argparse.ArgumentTypeError(f"{text!r}: driver, spark or driver,spark")
    return ",".join(engines)


def _lake_variants(text: str) -> str:
    """``cdc bench lakes``'s engines: ``driver``, ``spark``, each also as ``<engine>-nice<N>``
    (its committers at ``commit_nice: N``), comma-separated."""
    variants = [e.strip() for e in text.split(",") if e.strip()]
    if not variants or any(not re.fullmatch(r"(driver|spark)(-nice\d{1,2})?", e) for e in variants):
        raise argparse.ArgumentTypeError(f"{text!r}: driver, spark, driver,spark; an engine's committers at another "
                                         "commit_nice: driver-nice0")
    return ",".join(variants)


def _cmd_bench_lakes(args: argparse.Namespace) -> int:
    from cdc.bench.report import with_section
    from cdc.bench.lake_cadence import bench_lake_cadence, cadence_lines
    result = bench_lake_cadence(Path(args.state_dir), events=args.events, rate=args.rate, seconds=args.seconds,
                                rounds=args.rounds, engines=tuple(args.lake_engines.split(",")),
                                interval_s=args.interval, console=console)
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    if args.out:
        out = Path(args.out)
        heading = "## Lakes on their own commit cadence (`cdc bench lakes`)"
        out.write_text(with_section(out.read_text() if out.exists() else "# Benchmarks\n", heading,
                                    "\n".join([heading, "", *cadence_lines(result)])))
    return 0


def _cmd_bench_merge(args: argparse.Namespace) -> int:
    from cdc.bench.merge import bench_merge
    from cdc.bench.report import with_lake_section
    quiet = Console(file=open(os.devnull, "w")) if args.json else console  # noqa: SIM115
    if args.partitions < 1:
        raise SystemExit("cdc bench merge: --partitions must be at least 1")
    result = bench_merge(Path(args.state_dir), events=args.events, rate=args.rate, seconds=args.seconds,
                         partitions=args.partitions, scale_out=not args.no_scale_out, lake=not args.no_lake,
                         keep_running=args.keep_running, kafka_sources=args.kafka_sources,
                         lake_engines=tuple(args.lake_engines.split(",")), console=quiet)
    if args.json:
        print(json.dumps({**result["summary"], "kafka_sources": result.get("kafka_sources")}, indent=2))
    if args.out and result.get("lake"):
        out = Path(args.out)
        out.write_text(with_lake_section(out.read_text() if out.exists() else "# Benchmarks\n", result))
        quiet.print(f"wrote the lake section of {out}")
    return 0


def _cmd_bench_soak(args: argparse.Namespace) -> int:
    from cdc.bench.soak import LakeSoak, bench_soak
    result = bench_soak(Path(args.state_dir), minutes=args.minutes, rate=args.rate, rows=args.rows,
                        partitions=args.partitions, sample_s=args.sample_s, out=Path(args.out) if args.out else None,
                        png=Path(args.png or (f"docs/soak-lake{'-spark' if args.lake_engine == 'spark' else ''}.png" if args.lake else "docs/soak.png" if args.rate
                                              else "docs/soak-peak.png")) if args.out else None,
                        keep_running=args.keep_running, writers=args.writers, console=bench_console(args),
                        lake=LakeSoak(args.lake_engine, args.lake_retention_hours, args.lake_interval) if args.lake else None)
    if args.json:
        print(json.dumps({k: v for k, v in result.items()}, indent=2, default=str))
    return 0 if result["verdict"]["passed"] else 1


def _cmd_verify(args: argparse.Namespace) -> int:
    """Exit 0 only when every table equals every target."""
    import cdc.verify as verify
    cfg = load(args)
    if args.json:
        report = verify.verify(cfg, args.tables or None, changelog=args.changelog, chunk_size=args.chunk_size,
                               samples=args.samples)
    else:
        with console.status("verifying...") as status:
            report = verify.verify(cfg, args.tables or None, changelog=args.changelog, chunk_size=args.chunk_size,
                                   samples=args.samples, progress=lambda msg: status.update(f"verifying {msg}"))
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n")
    else:
        verify.print_report(report, console)
    return 0 if report.equal else 1


def _cmd_lake(args: argparse.Namespace) -> int:
    """The lake tables' maintenance (optimize, vacuum, expire), their files, or SQL over them."""
    import cdc.lake as lake
    cfg = load(args)
    if args.lake_command == "sql":
        columns, rows = lake.lake_sql(cfg, args.sql)
        results = [dict(zip(columns, r)) for r in rows]
    elif args.lake_command == "files":
        results = lake.file_counts(cfg, args.tables)
    elif args.lake_command == "commit":
        done = lake.commit_lakes(cfg, wait_s=args.wait)
        results = [{"sink": name, "committed by": done["by"], "result": figures} for name, figures in done["sinks"].items()]
    else:
        with console.status(f"lake {args.lake_command}...") as status:
            results = lake.maintain(cfg, args.lake_command, args.tables, retention_hours=args.retention_hours,
                                    progress=lambda msg: status.update(f"lake {args.lake_command}: {msg}"))
    if args.json:
        print(json.dumps(results, indent=2, default=str))
        return 0
    table = Table(*(list(results[0]) if results else ["result"]))
    for r in results:
        table.add_row(*(f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v) for v in r.values()))
    console.print(table)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    import cdc.demo as demo
    import cdc.demo_shards as demo_shards
    if args.flavor and args.shards:
        raise CommandError("cdc demo --shards runs on the machine's server only so far: leave out --flavor")
    state_dir = args.state_dir or (".cdc/demo-mysql" if args.flavor == "mysql" else ".cdc/demo")
    if args.shards:
        return demo_shards.run_shards_demo(Path(state_dir), ddl=args.ddl, keep_running=args.keep_running)
    return demo.run_demo(Path(state_dir), keep_running=args.keep_running, secure=args.secure,
                         lake_engine=args.lake_engine, flavor=args.flavor)


def _demo_parser(sub) -> None:
    """``cdc demo``: its arguments and handler."""
    demo_p = sub.add_parser("demo", help="run the pipeline on demo data on the embedded stack")
    demo_p.add_argument("--state-dir", default=None,
                        help="the embedded stack's directory (default .cdc/demo; .cdc/demo-mysql with --flavor mysql)")
    demo_p.add_argument("--flavor", choices=["mariadb", "mysql"], default=None,
                        help="the source server: mariadb (the machine's) or mysql (MySQL 9.7 from 'make mysql-server', "
                             "docs/mysql.md); default: as the stack in the state directory has it, else the machine's")
    demo_p.add_argument("--keep-running", action="store_true", help="leave the stack running at the end")
    demo_p.add_argument("--secure", action="store_true",
                        help="on a secure stack (cdc stack up --secure): TLS and passwords everywhere")
    demo_p.add_argument("--shards", action="store_true",
                        help="four shards on two source servers merged into one table (docs/sharding.md)")
    demo_p.add_argument("--ddl", choices=["pessimistic", "optimistic"], default="pessimistic",
                        help="with --shards: the route's sharding DDL mode (default pessimistic)")
    demo_p.add_argument("--lake-engine", choices=["spark", "driver"], default="spark",
                        help="who merges the Delta and Iceberg tables: Spark's executors, merge-on-read (default), "
                             "or the driver through delta-rs and pyiceberg (docs/lake.md)")
    demo_p.set_defaults(func=_cmd_demo)


def _produce_parser(sub) -> None:
    """``cdc produce``: its arguments and handler."""
    produce_p = sub.add_parser("produce", help="stream binlog row changes into Kafka")
    produce_p.add_argument("--reset-offsets", action="store_true",
                         help="forget the stored position (the next start follows producer.startup)")
    produce_p.add_argument("--exit-when-idle", type=float, default=None, metavar="SECONDS",
                         help="stop after this many seconds without binlog events and without a snapshot under way "
                              "(a paused one does not count)")
    produce_p.add_argument("--recover", choices=["resume", "snapshot"], default=None,
                         help="when Kafka lost this producer's history: re-publish from the position kept in the "
                              "state directory (resume), and also snapshot every captured table again (snapshot)")
    source_option(produce_p, "run the producer of this source (a name from 'sources': its settings, topic prefix "
                              "and producer name); needed when several are configured")
    produce_p.set_defaults(func=_cmd_produce)


def _bench_group(sub) -> argparse.Action:
    """``cdc bench``: the group each benchmark adds its parser to."""
    bench_p = sub.add_parser("bench", help="benchmarks on the embedded stack")
    bench_sub = bench_p.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    return bench_sub


def _merge_parser(sub) -> None:
    """``cdc merge``: its arguments and handler."""
    merge_p = sub.add_parser("merge", help="run the Spark merge job: DBLog dedup into the clean changelog and sinks")
    merge_p.add_argument("--available-now", action="store_true",
                       help="process what is in Kafka now, then exit (default: run until stopped)")
    merge_p.set_defaults(func=_cmd_merge)


def _bench_merge_parser(bench_sub) -> None:
    """``cdc bench merge``: its arguments and handler."""
    bench_merge_p = bench_sub.add_parser("merge", help="the Spark merge job into PostgreSQL: throughput and latency")
    bench_merge_p.add_argument("--events", type=int, default=1_000_000, help="change events in Kafka (default 1000000)")
    bench_merge_p.add_argument("--rate", type=int, default=5000, help="steady events/s for the latency run (0: skip)")
    bench_merge_p.add_argument("--seconds", type=float, default=30.0, help="length of the latency run")
    bench_merge_p.add_argument("--partitions", type=int, default=4,
                               help="partitions of the table topic (default 4; the configuration's default is 1)")
    bench_merge_p.add_argument("--state-dir", default=".cdc/bench")
    bench_merge_p.add_argument("--no-lake", action="store_true",
                               help="skip (f)/(g): the merge job into the changelog, Delta and Iceberg alone, the Delta latency")
    bench_merge_p.add_argument("--lake-engines", default="driver", type=_lake_engines,
                               help="(f)'s lake runs on these engines, comma-separated: driver, spark or "
                                    "driver,spark (default driver; (g) on the last one)")
    bench_merge_p.add_argument("--no-scale-out", action="store_true",
                               help="skip the standalone runs with one and two workers")
    bench_merge_p.add_argument("--kafka-sources", type=int, default=0, metavar="ROUNDS",
                               help="also read the same backlog through cdc-kafka and Spark's own kafka source, this "
                                    "many alternated rounds each (cdc/bench/kafka_sources.py; default 0: not)")
    bench_merge_p.add_argument("--json", action="store_true", help="print one JSON object with every figure")
    bench_merge_p.add_argument("--out", help="write (f)/(g) as the lake section of this file (docs/benchmarks.md), "
                                             "the rest of it kept")
    bench_merge_p.add_argument("--keep-running", action="store_true")
    bench_merge_p.set_defaults(func=_cmd_bench_merge)


def _cmd_bench_latency(args: argparse.Namespace) -> int:
    from cdc.bench.latency_breakdown import bench_latency
    if args.rate < 1 or args.seconds <= 0:
        raise SystemExit("cdc bench latency: --rate and --seconds must be positive")
    result = bench_latency(Path(args.state_dir), rate=args.rate, seconds=args.seconds, partitions=args.partitions,
                           trigger_s=args.trigger, idle_s=args.idle_seconds, source=args.source,
                           keep_running=args.keep_running,
                           console=bench_console(args))
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))
    return 0


def _bench_latency_parser(bench_sub) -> None:
    """``cdc bench latency``: its arguments and handler."""
    p = bench_sub.add_parser("latency", help="where a row's time goes from the source to PostgreSQL at a steady load")
    p.add_argument("--rate", type=int, default=5000, help="row inserts/s (default 5000)")
    p.add_argument("--seconds", type=float, default=30.0, help="length of the load (default 30)")
    p.add_argument("--partitions", type=int, default=4, help="partitions of the table topic (default 4)")
    p.add_argument("--trigger", type=float, default=None, metavar="SECONDS",
                   help="the merge job's trigger interval (default: the configuration's spark.trigger_interval_s)")
    p.add_argument("--source", choices=("ours", "debezium"), default="ours",
                   help="what writes the table topic: our producer (default), or Debezium's MySQL connector in "
                        "Kafka Connect, read as kafka.input: debezium (the topics cdc bench sinks races on)")
    p.add_argument("--idle-seconds", type=float, default=30.0,
                   help="then the idle pipeline's CPU over this long, and single changes (default 30; 0: skip)")
    p.add_argument("--state-dir", default=".cdc/bench")
    p.add_argument("--keep-running", action="store_true")
    p.add_argument("--json", action="store_true", help="print one JSON object with every figure")
    p.set_defaults(func=_cmd_bench_latency)


def _bench_lakes_parser(bench_sub) -> None:
    """``cdc bench lakes``: its arguments and handler."""
    bench_lakes_p = bench_sub.add_parser("lakes", help="the lake sinks on their commit cadence: backlog rate with both "
                                         "lakes on, the PostgreSQL sink's latency with them on and off, their freshness")
    bench_lakes_p.add_argument("--events", type=int, default=500_000, help="change events of the backlog (default 500000)")
    bench_lakes_p.add_argument("--rate", type=int, default=5000, help="inserts/s of the latency runs (0: none)")
    bench_lakes_p.add_argument("--seconds", type=float, default=60.0, help="length of each latency run (default 60)")
    bench_lakes_p.add_argument("--rounds", type=int, default=2, help="alternated rounds (default 2)")
    bench_lakes_p.add_argument("--lake-engines", default="driver,spark", type=_lake_variants,
                               help="engines, comma-separated (default driver,spark); <engine>-nice<N>: its "
                                    "committers at commit_nice N (e.g. driver,driver-nice0)")
    bench_lakes_p.add_argument("--interval", type=float, default=10.0, help="the lakes' commit_interval_s (default 10, not the sinks' 60: a latency run lasts a minute)")
    bench_lakes_p.add_argument("--state-dir", default=".cdc/bench")
    bench_lakes_p.add_argument("--json", action="store_true", help="print every figure as JSON")
    bench_lakes_p.add_argument("--out", help="write the figures as a section of this file (docs/benchmarks.md)")
    bench_lakes_p.set_defaults(func=_cmd_bench_lakes)


def _bench_soak_parser(bench_sub) -> None:
    """``cdc bench soak``: its arguments and handler."""
    bench_soak_p = bench_sub.add_parser(
        "soak", help="producer and merge job for an hour under a steady mixed load: latency, memory, no stall")
    bench_soak_p.add_argument("--minutes", type=float, default=60.0, help="length of the load (default 60)")
    bench_soak_p.add_argument("--rate", type=int, default=1000,
                              help="row changes a second (default 1000); 0: the source's peak, each change a "
                                   "transaction of its own written as fast as the server takes it")
    bench_soak_p.add_argument("--writers", type=int, default=1,
                              help="connections writing side by side (default 1; e.g. 4 with --rate 0)")
    bench_soak_p.add_argument("--rows", type=int, default=50_000, help="rows before the producer starts")
    bench_soak_p.add_argument("--partitions", type=int, default=2, help="partitions of the table topic (default 2)")
    bench_soak_p.add_argument("--sample-s", type=float, default=30.0, help="seconds between samples (default 30)")
    bench_soak_p.add_argument("--out", help="write the soak section of this file (e.g. docs/benchmarks.md)")
    bench_soak_p.add_argument("--png", help="the plot, with --out (default docs/soak.png, docs/soak-lake.png with "
                                            "--lake, docs/soak-peak.png with --rate 0)")
    bench_soak_p.add_argument("--lake", action="store_true",
                              help="the Delta and Iceberg sinks on too (as cdc stack up has them), their disk sampled")
    bench_soak_p.add_argument("--lake-retention-hours", type=int, default=1,
                              help="with --lake: the sinks' retention_hours (default 1; 0 keeps only the latest)")
    bench_soak_p.add_argument("--lake-engine", choices=["driver", "spark"], default="driver",
                              help="with --lake: the engine that merges into them (default driver; spark: "
                                   "Spark's executors, merge-on-read)")
    bench_soak_p.add_argument("--lake-interval", type=float, default=None,
                              help="with --lake: the sinks' commit_interval_s (default: theirs)")
    bench_soak_p.add_argument("--state-dir", default=".cdc/bench")
    bench_soak_p.add_argument("--keep-running", action="store_true")
    bench_soak_p.add_argument("--json", action="store_true", help="print one JSON object with every figure")
    bench_soak_p.set_defaults(func=_cmd_bench_soak)


def _bench_report_parser(bench_sub) -> None:
    """``cdc bench report``: its arguments and handler."""
    bench_report_p = bench_sub.add_parser("report", help="stream, snapshot and merge benchmarks into docs/benchmarks.md")
    bench_report_p.add_argument("--out", default="docs/benchmarks.md")
    bench_report_p.add_argument("--stream-rows", type=int, default=500_000)
    bench_report_p.add_argument("--snapshot-rows", type=int, default=1_000_000)
    bench_report_p.add_argument("--merge-events", type=int, default=1_000_000)
    bench_report_p.add_argument("--state-dir", default=".cdc/bench")
    bench_report_p.set_defaults(func=_cmd_bench_report)


def _bench_race_parser(bench_sub) -> None:
    """``cdc bench race``: its arguments and handler."""
    bench_race_p = bench_sub.add_parser(
        "race", help="ours vs Debezium embedded: bench stream and snapshot with --debezium, into docs/benchmarks.md")
    bench_race_p.add_argument("--out", default="docs/benchmarks.md", help="its race section is replaced")
    bench_race_p.add_argument("--stream-rows", type=int, default=1_000_000)
    bench_race_p.add_argument("--snapshot-rows", type=int, default=500_000)
    bench_race_p.add_argument("--stream-runs", default="kafka:avro", metavar="MODE:FORMAT,...",
                              help="Debezium's streaming runs (default kafka:avro, the headline's; count:avro and "
                                   "count:json add rows below it; kafka:json writes about 3.6 KB a record into the "
                                   "in-memory broker)")
    bench_race_p.add_argument("--snapshot-runs", default="kafka:avro", metavar="MODE:FORMAT,...")
    bench_race_p.add_argument("--chunk-sizes", default="8192,1024", help="Debezium's snapshot chunk sizes")
    bench_race_p.add_argument("--rounds", type=int, default=3,
                              help="alternated rounds (ours first in odd rounds, Debezium first in even); every "
                                   "figure is the median with the min-max")
    bench_race_p.add_argument("--debezium-defaults", action="store_true",
                              help="also run Debezium (Kafka, Avro) at its engine's, producer's and JVM's defaults: "
                                   "an extra row, never the headline")
    bench_race_p.add_argument("--debezium-heap", default="1g", metavar="SIZE",
                              help="the heap of Debezium's JVM in the race (-Xmx; default 1g)")
    bench_race_p.add_argument("--json-out", metavar="FILE", help="also write both results as one JSON object")
    bench_race_p.add_argument("--stream-json", metavar="FILE",
                              help="use this `cdc bench stream --debezium --json` output instead of running it")
    bench_race_p.add_argument("--snapshot-json", metavar="FILE",
                              help="use this `cdc bench snapshot --debezium --json` output instead of running it")
    bench_race_p.add_argument("--oltp-rows", type=int, default=OLTP_ROWS,
                              help="the streaming race again on this many changes made as single-row autocommit "
                                   "transactions (default %(default)s; 0: not run)")
    bench_race_p.add_argument("--oltp-json", metavar="FILE",
                              help="use this `cdc bench stream --single-row --debezium --json` output instead")
    bench_race_p.add_argument("--state-dir", default=".cdc/bench")
    bench_race_p.set_defaults(func=_cmd_bench_race)


def _bench_peers_parser(bench_sub) -> None:
    """``cdc bench peers``: its arguments and handler."""
    bench_peers_p = bench_sub.add_parser(
        "peers", help="ours vs the peers as deployed: Debezium in Kafka Connect (streaming, single-row transactions, "
                      "incremental snapshot) and Flink CDC's snapshot, into docs/benchmarks.md (make bench-race)")
    bench_peers_p.add_argument("--out", default="docs/benchmarks.md",
                               help="its peers section is replaced (put first when new); '' writes nothing")
    bench_peers_p.add_argument("--peers", default="connect,flink",
                               help="connect, flink or both, comma-separated (default connect,flink)")
    bench_peers_p.add_argument("--stream-rows", type=int, default=1_000_000, help="changes in multi-row statements")
    bench_peers_p.add_argument("--oltp-rows", type=int, default=100_000,
                               help="changes as single-row autocommit transactions (0: not run)")
    bench_peers_p.add_argument("--snapshot-rows", type=int, default=1_000_000, help="the snapshotted table's rows")
    bench_peers_p.add_argument("--chunk-size", type=int, default=8192, help="every side's snapshot chunk rows")
    bench_peers_p.add_argument("--parallelisms", default="1,2", help="Flink CDC's (and our chunk readers') counts")
    bench_peers_p.add_argument("--rounds", type=int, default=3, help="alternated rounds; medians with min-max")
    bench_peers_p.add_argument("--heap", default="1g", metavar="SIZE", help="the peers' JVM heap (-Xmx)")
    bench_peers_p.add_argument("--compression", default="lz4", choices=COMPRESSIONS,
                               help="every side's record batch compression (default lz4)")
    bench_peers_p.add_argument("--json-out", metavar="FILE", help="also write the whole result as JSON")
    bench_peers_p.add_argument("--state-dir", default=".cdc/bench")
    bench_peers_p.add_argument("--keep-running", action="store_true")
    bench_peers_p.set_defaults(func=_cmd_bench_peers)


def _bench_sinks_parser(bench_sub) -> None:
    """``cdc bench sinks``: its arguments and handler."""
    bench_sinks_p = bench_sub.add_parser(
        "sinks", help="the merge job vs Debezium's JDBC sink on the same Debezium topics: events/s over one backlog "
                      "and p99 latency under load, both sinks verified (make bench-race)")
    bench_sinks_p.add_argument("--out", default="docs/benchmarks.md", help="its section is replaced ('' : none)")
    bench_sinks_p.add_argument("--events", type=int, default=1_000_000, help="changes in the backlog")
    bench_sinks_p.add_argument("--rate", type=int, default=5000, help="row inserts/s of the latency runs (0: none)")
    bench_sinks_p.add_argument("--seconds", type=float, default=30.0, help="length of each latency run")
    bench_sinks_p.add_argument("--rounds", type=int, default=3, help="alternated rounds; medians with min-max")
    bench_sinks_p.add_argument("--partitions", type=int, default=4, help="the Debezium topic's partitions")
    bench_sinks_p.add_argument("--tasks", type=int, default=2, help="the JDBC sink's tasks.max (local[2]: 2)")
    bench_sinks_p.add_argument("--heap", default="1g", metavar="SIZE", help="the Connect worker's heap (-Xmx)")
    bench_sinks_p.add_argument("--json-out", metavar="FILE", help="also write the whole result as JSON")
    bench_sinks_p.add_argument("--state-dir", default=".cdc/bench")
    bench_sinks_p.add_argument("--keep-running", action="store_true")
    bench_sinks_p.set_defaults(func=_cmd_bench_sinks)


def _chaos_parser(sub) -> None:
    """``cdc chaos``: its arguments and handler."""
    chaos_p = sub.add_parser("chaos", help="the pipeline under load with processes killed; must end equal (make chaos)")
    chaos_p.add_argument("--seed", type=int, default=1)
    chaos_p.add_argument("--rows", type=int, default=20_000, help="rows per table before the producer starts")
    chaos_p.add_argument("--duration", type=float, default=180.0, help="seconds over which the kills are spread")
    chaos_p.add_argument("--producer-kills", type=int, default=20)
    chaos_p.add_argument("--job-kills", type=int, default=8)
    chaos_p.add_argument("--brokers", type=int, choices=[1, 3], default=3,
                         help="the stack's Kafka nodes (default 3): with 3, the node leading the busiest partition is "
                              "killed during the snapshots and again during streaming, and one shut down, each started "
                              "again")
    chaos_p.add_argument("--flavor", choices=["mariadb", "mysql"], default=None,
                         help="the source server (default: the machine's, MariaDB; mysql: MySQL 9.7 from "
                              "'make mysql-server')")
    chaos_p.add_argument("--state-dir", default=None, help="default .cdc/chaos (.cdc/chaos-mysql with --flavor mysql)")
    chaos_p.add_argument("--keep-running", action="store_true")
    chaos_p.add_argument("--read-only", action="store_true",
                         help="the producer as a CDC user without write privileges, read-only snapshots")
    chaos_p.set_defaults(func=_cmd_chaos)


def _lake_parser(sub) -> None:
    """``cdc lake``: its arguments and handler."""
    lake_p = sub.add_parser("lake", help="the lake tables (Delta, Iceberg): optimize, vacuum, expire, files, sql")
    lake_sub = lake_p.add_subparsers(dest="lake_command", required=True, metavar="ACTION")
    for name, help_ in (("optimize", "compact small files (Delta: OPTIMIZE and a log checkpoint)"),
                        ("vacuum", "remove files no version within the retention references, and stale staged parts"),
                        ("expire", "expire Iceberg snapshots older than the retention, delete the files none left needs"),
                        ("files", "data files per table")):
        p = lake_sub.add_parser(name, help=help_)
        p.add_argument("tables", nargs="*", metavar="DB.TABLE", help="tables (names or regular expressions; default all)")
        p.add_argument("--retention-hours", type=float, default=168.0,
                       help="what vacuum and expire keep (default 168: a week)")
        p.add_argument("--json", action="store_true", help="print the results as JSON")
        p.set_defaults(func=_cmd_lake)
    commit_p = lake_sub.add_parser("commit", help="commit what the lake sinks hold staged now (the running merge job's "
                                   "committers, or the staged batches a stopped job left)")
    commit_p.add_argument("--wait", type=float, default=300.0, help="seconds to wait for the merge job (default 300)")
    commit_p.add_argument("--json", action="store_true", help="print the results as JSON")
    commit_p.set_defaults(func=_cmd_lake)
    sql_p = lake_sub.add_parser("sql", help="run DuckDB SQL over the lake tables (delta.<db>.<table>, iceberg.<db>.<table>)")
    sql_p.add_argument("sql", help='e.g. "SELECT count(*) FROM delta.shop.customers"')
    sql_p.add_argument("--json", action="store_true", help="print the rows as JSON")
    sql_p.set_defaults(func=_cmd_lake)


def _verify_parser(sub) -> None:
    """``cdc verify``: its arguments and handler."""
    ver_p = sub.add_parser("verify", help="compare source tables with the sinks (chunk checksums, then row by row)")
    ver_p.add_argument("tables", nargs="*", metavar="DB.TABLE",
                     help="tables to verify (names or regular expressions; default: every captured table)")
    ver_p.add_argument("--changelog", action="store_true",
                     help="also replay each clean changelog topic (memory proportional to the table)")
    ver_p.add_argument("--chunk-size", type=int, default=10_000, help="rows per checksum chunk (default 10000)")
    ver_p.add_argument("--samples", type=int, default=5, help="differing rows shown per kind (default 5)")
    ver_p.add_argument("--json", action="store_true", help="print the report as JSON")
    ver_p.set_defaults(func=_cmd_verify)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cdc", description="MySQL change data capture into Kafka, merged by Spark")
    parser.add_argument("-c", "--config", default=str(DEFAULT_CONFIG_PATH),
                        help="configuration file (default ./cdc.yaml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (stack_command.add_parser, _demo_parser, _produce_parser):
        add(sub)
    bench_sub = _bench_group(sub)
    for add in (signal_sender.add_parser, _merge_parser, _chaos_parser, _lake_parser, status_command.add_parser,
                route_reset.add_parser, _verify_parser):
        add(sub)
    for add_benchmark in (stream_bench.add_parser, snapshot_bench.add_parser, _bench_merge_parser, _bench_lakes_parser,
                          broker_bench.add_parser, _bench_soak_parser, _bench_report_parser, _bench_race_parser,
                          _bench_peers_parser, _bench_sinks_parser, _bench_latency_parser):
        add_benchmark(bench_sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.configure(args.verbose)
    try:
        return args.func(args)
    except CDCError as exc:
        err_console.print(f"[red]error:[/red] {exc}", markup=True, highlight=False, soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
