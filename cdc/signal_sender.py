"""Sending a signal to the producer, as ``cdc snapshot`` does: a row inserted into the
signal table (the ``source`` channel) or a record on ``<prefix>._signals`` keyed by the
producer's name (the ``kafka`` channel).

Without ``--channel`` the signal table is used, unless the configuration switched the
source channel off or the source is read-only (``snapshot.read_only``: the CDC user
writes nothing there): then the Kafka channel.
"""

from __future__ import annotations

from dataclasses import dataclass

import pymysql
from confluent_kafka import KafkaException, Producer

from cdc.errors import CommandError
from common.config import CDCConfig
from common.kafka.clients import ensure_topics, producer_config
from common.sql.sessions import connect
from contract.signals import new_signal_id, send_signal, signal_record

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
