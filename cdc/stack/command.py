"""``cdc stack up|down|status``: the command's arguments and handlers (the stack itself:
:mod:`cdc.stack.manager`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from cdc.cli_common import console
from cdc.stack.manager import SOURCE_NAMES, stack_down, stack_status, stack_up


def _cmd_stack_up(args: argparse.Namespace) -> int:
    with console.status("starting the embedded stack..."):
        info = stack_up(Path(args.state_dir), kafka_bootstrap=args.kafka_bootstrap, postgres_dsn=args.postgres_dsn,
                        on_lost_kafka=args.on_lost_kafka, replicas=args.replicas, read_only=args.read_only,
                        sources=args.sources, monitoring=args.monitoring, spark_ui=args.spark_ui,
                        secure=args.secure, brokers=args.brokers, flavor=args.flavor)
    m, k, p = info.mysql, info.kafka, info.postgres
    console.print(f"[green]stack up[/green] in {info.state_dir}")
    console.print(f"  mysql     {m['flavor']} {m['version']} at {m['host']}:{m['port']} (pid {m['pid']})"
                  + (", CDC user read-only" if m.get("cdc_read_only") else ""))
    for index, r in enumerate(info.replicas, start=1):
        console.print(f"  replica{index}  at {r['host']}:{r['port']} (pid {r['pid']}, server-id {r['server_id']}, "
                      "read-only, GTID replication)")
    for index, s in enumerate(info.sources, start=2):
        console.print(f"  mysql{index}    {s['flavor']} {s['version']} at {s['host']}:{s['port']} (pid {s['pid']}), "
                      "a second source server")
    console.print(f"  kafka     {k['bootstrap_servers']}" + (
        f" (Apache Kafka, {len(k['nodes'])} node(s), pids {', '.join(str(n['pid']) for n in k['nodes'])})"
        if k.get("embedded") else " (external)"))
    console.print("  postgres  " + (f"127.0.0.1:{p['port']} (pid {p['pid']})" if p.get("embedded") else "external DSN"))
    mon = info.data.get("monitoring")
    if mon:
        console.print(f"  prometheus {mon['prometheus']['url']} (pid {mon['prometheus']['pid']}), scraping the "
                      f"producer on :{mon['producer_port']} and the merge job on :{mon['merge_port']}")
    if info.data.get("spark_ui_port"):
        console.print(f"  spark ui  http://127.0.0.1:{info.data['spark_ui_port']} (the merge job's driver, while it runs)")
    console.print(f"  config    {info.config_path}   (use: cdc -c {info.config_path} ...)")
    if info.data.get("secure"):
        console.print(f"  secure    TLS only (CA {info.data['secure']['ca']}), passwords in {info.state_dir / 'secrets'}; "
                      "Kafka SASL_SSL (SCRAM-SHA-512)")
    if info.sources_config_path is not None:
        names = "|".join(SOURCE_NAMES[:1 + len(info.sources)])
        console.print(f"  sources   {info.sources_config_path}   (every source server: cdc -c {info.sources_config_path} "
                      f"produce --source {names})")
    for note in info.notes:
        console.print(f"[yellow]note:[/yellow] {note}", highlight=False)
    return 0


def _cmd_stack_down(args: argparse.Namespace) -> int:
    stopped = stack_down(Path(args.state_dir))
    console.print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def _cmd_stack_status(args: argparse.Namespace) -> int:
    report = stack_status(Path(args.state_dir))
    table = Table("part", "health", "details")
    for part, (ok, detail) in report.items():
        table.add_row(part, "[green]up[/green]" if ok else "[red]down[/red]", detail)
    console.print(table)
    return 0 if all(ok for ok, _ in report.values()) else 1



def add_parser(sub) -> None:
    """``cdc stack``: its arguments and handlers, under the ``cdc`` command's ``sub``."""
    stack_p = sub.add_parser("stack", help="the embedded stack: MySQL-compatible server, Kafka broker, PostgreSQL")
    stack_sub = stack_p.add_subparsers(dest="stack_command", required=True, metavar="ACTION")
    for name, fn, help_ in (("up", _cmd_stack_up, "start (idempotent)"), ("down", _cmd_stack_down, "stop what up started"),
                            ("status", _cmd_stack_status, "health of each part")):
        p = stack_sub.add_parser(name, help=help_)
        p.add_argument("--state-dir", default=".cdc/stack", help="where data, logs, stack.json and cdc.yaml live")
        p.set_defaults(func=fn)
        if name == "up":
            p.add_argument("--kafka-bootstrap", help="use this external Kafka instead of the embedded broker")
            p.add_argument("--postgres-dsn", help="use this existing PostgreSQL instead of a private one")
            p.add_argument("--replicas", type=int, choices=[0, 1, 2], default=None, metavar="N",
                           help="run N MariaDB replicas of the server (0..2; GTID replication, read-only); "
                                "default: as many as the stack has, none for a new stack")
            p.add_argument("--sources", type=int, choices=[1, 2], default=None, metavar="N",
                           help="run N source servers (1..2): with 2, a second server of its own (mysql2) and "
                                "cdc-sources.yaml naming both under 'sources' (east, west); default: as many as the "
                                "stack has, one for a new stack")
            p.add_argument("--read-only", action=argparse.BooleanOptionalAction, default=None,
                           help="a CDC user that writes nothing (REPLICATION SLAVE, REPLICATION CLIENT, SELECT; "
                                "snapshot.read_only: true in cdc.yaml); --no-read-only gives it back INSERT and "
                                "DELETE on the signal table; default: as the stack has it, writable for a new stack")
            p.add_argument("--monitoring", action=argparse.BooleanOptionalAction, default=None,
                           help="metrics ports for the producers and the merge job in cdc.yaml, and a Prometheus "
                                "(the machine's 'prometheus') scraping them with the alert rules of "
                                "cdc/monitoring/alerts.yml; --no-monitoring stops it; default: as the stack has it, "
                                "none for a new stack")
            p.add_argument("--spark-ui", action=argparse.BooleanOptionalAction, default=None,
                           help="Spark's web UI for the merge job's driver on a port of its own (spark.ui_port in "
                                "cdc.yaml); default: as the stack has it, off for a new stack")
            p.add_argument("--secure", action=argparse.BooleanOptionalAction, default=None,
                           help="TLS and passwords on every connection: MariaDB TLS only, PostgreSQL hostssl with a "
                                "password, Kafka SASL_SSL (SCRAM-SHA-512) with ACLs per user; certificates "
                                "of a CA of the stack's own, passwords in <state-dir>/secrets (docs/operations.md, "
                                "'Secure deployment'); default: as the stack has it, plain for a new stack")
            p.add_argument("--flavor", choices=["mariadb", "mysql"], default=None,
                           help="the source server: mariadb (the machine's MariaDB, from apt) or mysql (MySQL 9.7 "
                                "from the Debian unstable root 'make mysql-server' builds once, docs/mysql.md); "
                                "default: as the stack has it, the machine's server for a new stack")
            p.add_argument("--brokers", type=int, choices=[1, 3], default=None, metavar="N",
                           help="the embedded Apache Kafka's nodes (each broker and controller): 1, or 3 with "
                                "replication factor 3 and min.insync.replicas 2; default: as the stack has it, one "
                                "for a new stack")
            p.add_argument("--on-lost-kafka", choices=["recover", "refuse"], default="recover",
                           help="when the embedded Kafka's data directory was lost (its topics are gone) and the "
                                "state directory holds a merge checkpoint or producer positions: reset them and "
                                "have the producer recover by snapshot (default), or refuse to start")
