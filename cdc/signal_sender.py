"""Sending a signal to the producer, as ``cdc snapshot`` does: a row inserted into the
signal table (the ``source`` channel) or a record on ``<prefix>._signals`` keyed by the
producer's name (the ``kafka`` channel).

Without ``--channel`` the signal table is used, unless the configuration switched the
source channel off or the source is read-only (``snapshot.read_only``: the CDC user
writes nothing there): then the Kafka channel.  The command's arguments and handler:
:func:`add_parser`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pymysql
from confluent_kafka import KafkaException, Producer

from cdc import cli_common
from cdc.errors import CommandError
from cdc.progress import NotificationFollower
from common.config import CDCConfig
from common.kafka.clients import ensure_topics, producer_config
from common.sql.sessions import connect
from contract.signals import execute_snapshot_data, new_signal_id, send_signal, signal_record

CHANNELS = ("source", "kafka")


@dataclass
class SentSignal:
    id: str
    channel: str
    where: str  # for the user: the table or the topic and key


def choose_channel(cfg: CDCConfig, forced: str | None = None) -> str:
    """The channel a signal goes through: ``forced`` (``--channel``) when the producer
    reads it, else the signal table unless it is off or the source is read-only."""
    enabled = cfg.source.signal_channels
    if forced is not None:
        if forced not in CHANNELS:
            raise CommandError(f"unknown signal channel {forced!r} (use source or kafka)")
        if forced not in enabled:
            raise CommandError(f"the {forced} signal channel is off (source.signal_channels: "
                               f"{', '.join(enabled) or 'none'}): the producer would not act on the signal")
        return forced
    read_only = bool(getattr(cfg.snapshot, "read_only", False))
    if "source" in enabled and not read_only:
        return "source"
    if "kafka" in enabled:
        return "kafka"
    if not enabled:
        raise CommandError("both signal channels are off (source.signal_channels is empty): the producer acts on "
                           "no signal; switch one on")
    raise CommandError("snapshot.read_only is on, so the CDC user writes nothing into the signal table, and the kafka "
                       "signal channel is off: add kafka to source.signal_channels, or pass --channel source with a "
                       "configuration whose user may insert into the signal table")


def send(cfg: CDCConfig, channel: str, signal_type: str, data: dict | None = None,
         signal_id: str | None = None) -> SentSignal:
    """Send one signal through ``channel`` (``source`` or ``kafka``)."""
    sid = signal_id or new_signal_id()
    if channel == "kafka":
        topic, key, value = signal_record(cfg.kafka.topic_prefix, cfg.producer.name, sid, signal_type, data)
        errors: list[str] = []
        try:
            ensure_topics(cfg.kafka, [topic], partitions=1)
            producer = Producer(producer_config(cfg.kafka))
            producer.produce(topic, value, key, on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)
            left = producer.flush(30)
        except KafkaException as exc:
            raise CommandError(f"the signal could not be sent to {topic} on {cfg.kafka.bootstrap_servers}: "
                               f"{exc}") from None
        if left or errors:
            raise CommandError(f"the signal could not be sent to {topic} on {cfg.kafka.bootstrap_servers}: "
                               f"{'; '.join(errors) or 'not acknowledged within 30s'}")
        return SentSignal(sid, channel, f"{topic} (key {cfg.producer.name})")
    if channel != "source":
        raise CommandError(f"unknown signal channel {channel!r} (use source or kafka)")
    table = cfg.source.signal_table
    conn = connect(cfg.source)
    try:
        send_signal(conn, table, signal_type, data, sid)
    except pymysql.err.MySQLError as exc:
        raise CommandError(f"the signal could not be inserted into {table} as {cfg.source.user}: {exc}"
                           + ("; use --channel kafka" if "kafka" in cfg.source.signal_channels else "")) from None
    finally:
        conn.close()
    return SentSignal(sid, channel, table)


def _cmd_snapshot(args: argparse.Namespace) -> int:
    """Send a signal: a row inserted into the signal table (as the CDC user), like ``INSERT
    INTO cdc_signal ...`` would, or a record on the Kafka signal channel
    (:func:`send`)."""
    console = cli_common.console
    cfg = cli_common.load(args).for_source(args.source)
    channel = choose_channel(cfg, args.channel)
    if args.pause or args.resume:
        kind, data = ("pause-snapshot" if args.pause else "resume-snapshot"), {"type": "incremental"}
    elif args.stop:
        kind, data = "stop-snapshot", {"type": "incremental", **({"data-collections": args.tables} if args.tables else {})}
    else:
        if not args.tables:
            raise CommandError("name the tables to snapshot, e.g. 'cdc snapshot shop.orders'")
        kind, data = "execute-snapshot", execute_snapshot_data(args.tables, where=args.where,
                                                               surrogate_key=args.surrogate_key,
                                                               delete_missing=args.delete_missing,
                                                               blocking=args.blocking)
    follower = None
    if args.follow and kind == "execute-snapshot":
        follower = NotificationFollower(cfg)
    try:
        sent = send(cfg, channel, kind, data)
    except BaseException:
        if follower is not None:
            follower.close()
        raise
    console.print(f"signal {sent.id} ({kind}) {'inserted into' if channel == 'source' else 'sent to'} {sent.where}",
                  highlight=False)
    if follower is None:
        return 0
    try:
        result = follower.follow(console, sent.id, args.timeout)
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


def add_parser(sub) -> None:
    """``cdc snapshot``: its arguments and handler, under the ``cdc`` command's ``sub``."""
    snap_p = sub.add_parser("snapshot", help="trigger, pause, resume or stop an incremental snapshot, or take a "
                                             "blocking one (a signal)")
    snap_p.add_argument("tables", nargs="*", metavar="DB.TABLE",
                      help="tables to snapshot (names or regular expressions, as in the signal's data-collections)")
    snap_p.add_argument("--where", metavar="FILTER", help="only rows matching this predicate (additional-conditions)")
    snap_p.add_argument("--surrogate-key", metavar="COLUMN", help="chunk on this unique column instead of the primary key")
    snap_p.add_argument("--delete-missing", action="store_true",
                      help="once a table is read, the sinks delete the rows it did not find (rows deleted at the "
                           "source while their changes were lost)")
    snap_p.add_argument("--blocking", action="store_true",
                        help="Debezium's blocking snapshot: the stream pauses while the tables are read whole, "
                             "then goes on from where it paused (--where: a condition, or SELECT * FROM ... WHERE ...)")
    action = snap_p.add_mutually_exclusive_group()
    action.add_argument("--stop", action="store_true", help="stop the running snapshot (of TABLES, or all)")
    action.add_argument("--pause", action="store_true", help="pause the running snapshot")
    action.add_argument("--resume", action="store_true", help="resume a paused snapshot")
    snap_p.add_argument("--channel", choices=list(CHANNELS), default=None,
                        help="send the signal as a row of the signal table (source) or a record on <prefix>._signals "
                             "(kafka); default: source, unless source.signal_channels leaves it out or "
                             "snapshot.read_only is on")
    snap_p.add_argument("--follow", action="store_true", help="draw progress bars until the tables are done")
    snap_p.add_argument("--timeout", type=float, default=None, help="with --follow: give up after SECONDS")
    cli_common.source_option(snap_p, "signal the producer of this source (its signal table, or its <prefix>._signals topic "
                           "keyed by its name); needed when several are configured")
    snap_p.set_defaults(func=_cmd_snapshot)
