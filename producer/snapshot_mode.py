"""Debezium's ``snapshot.mode``, mapped onto the producer's start settings.

Debezium decides on every start, by its snapshotter, whether to snapshot the data (with or
without stored offsets), whether to stream afterwards, whether to snapshot the schema, and
what to do when the stored offset's binlog is gone (a *data error*) or the schema history is
(a *schema error*).  Here the same questions have these answers (docs/configuration.md,
"snapshot.mode"):

* data when no position is stored: ``producer.startup.mode: initial``, its snapshot of every
  captured table a blocking one at the start position (Debezium's initial snapshot:
  :mod:`producer.session_start`, :mod:`producer.snapshot.blocking`), the stream after it;
* data on every start: the same snapshot, also when a position is stored (taken there, and
  streaming goes on from there, so nothing between it and the snapshot is lost);
* no streaming: the producer stops once that snapshot is done (a restart after it stops at
  once: there is nothing left to do);
* data error: ``producer.startup.when_needed: snapshot`` (stream from the current position and
  snapshot every captured table again, delete-missing);
* schema: the writer schemas of every captured table published to ``<prefix>._schemas``
  (the project's schema history: the binlog's own table maps decode the rows, the schemas
  topic is what consumers decode them with); schema error: that topic lost while a position
  is stored (:func:`schemas_lost`).

:func:`snapshot_mode` gives the :class:`SnapshotMode` of a configuration: ``snapshot.mode``'s
when set, else the one ``producer.startup`` describes.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.config import CDCConfig, StartupConfig
from common.errors import ConfigError

#: The modes that snapshot the data when no position is stored: they start where
#: ``startup.mode: initial`` starts, so ``producer.startup.mode`` cannot say otherwise.
_SNAPSHOTTING = ("initial", "initial_only", "when_needed", "always")


@dataclass(frozen=True)
class SnapshotMode:
    """What a start does (see the module's docstring)."""

    #: ``producer.startup`` as the mode sets it (``mode`` and ``when_needed``).
    startup: StartupConfig
    #: The setting that says so, for messages (``snapshot.mode: always``, ``producer.startup``).
    setting: str
    snapshot_every_start: bool = False
    stream: bool = True
    schemas_every_start: bool = False
    schemas_on_loss: bool = False

    @property
    def debezium(self) -> bool:
        return self.setting.startswith("snapshot.mode")

    def purged_hint(self) -> str:
        """How to make a start after purged binlogs snapshot again, in the user's terms."""
        if self.debezium:
            return ("set snapshot.mode: when_needed (or configuration_based with snapshot_on_data_error: true; "
                    "environment CDC__SNAPSHOT__MODE=when_needed)")
        return "set producer.startup.when_needed: snapshot (environment CDC__PRODUCER__STARTUP__WHEN_NEEDED=snapshot)"

    def schemas_hint(self) -> str:
        return ("set snapshot.mode: recovery (environment CDC__SNAPSHOT__MODE=recovery; or configuration_based with "
                "snapshot_on_schema_error: true)")


def snapshot_mode(cfg: CDCConfig) -> SnapshotMode:
    """The :class:`SnapshotMode` of ``cfg``; a :class:`ConfigError` naming both settings when
    ``snapshot.mode`` and ``producer.startup`` say different things."""
    mode = cfg.snapshot.mode
    st = cfg.producer.startup
    if mode is None:
        return SnapshotMode(st, "producer.startup")
    flags = cfg.snapshot.configuration_based
    if mode == "configuration_based" and flags is None:
        raise ConfigError("snapshot.mode: configuration_based needs snapshot.configuration_based (snapshot_data, "
                          "snapshot_schema, start_stream, snapshot_on_schema_error, snapshot_on_data_error: Debezium's "
                          "snapshot.mode.configuration.based.* settings)")
    on_data_error = mode == "when_needed" or (mode == "configuration_based" and flags.snapshot_on_data_error)
    if st.when_needed == "snapshot" and not on_data_error:  # (its default, stop, is every other mode's)
        raise ConfigError(f"snapshot.mode: {mode} stops after purged binlogs, but producer.startup.when_needed is "
                          "'snapshot': give one of them (snapshot.mode: when_needed is producer.startup.when_needed: "
                          "snapshot with startup.mode: initial)")
    snapshots = mode in _SNAPSHOTTING or (mode == "configuration_based" and flags.snapshot_data)
    if snapshots and st.mode not in ("initial", "latest"):  # (latest: the default)
        raise ConfigError(f"snapshot.mode: {mode} snapshots the captured tables and streams from the current position "
                          f"when no position is stored, but producer.startup.mode is {st.mode!r}: give one of them "
                          "(snapshot.mode: no_data or recovery start where producer.startup.mode says)")
    if not snapshots and st.mode == "initial":
        raise ConfigError(f"snapshot.mode: {mode} takes no data snapshot, but producer.startup.mode is 'initial': give "
                          "one of them (snapshot.mode: initial is producer.startup.mode: initial)")
    start_mode = "initial" if mode in _SNAPSHOTTING else st.mode
    if mode == "configuration_based":
        start_mode = "initial" if flags.snapshot_data else st.mode
    startup = st.model_copy(update={"mode": start_mode, "when_needed": "snapshot" if on_data_error else "stop"})
    setting = f"snapshot.mode: {mode}"
    if mode == "configuration_based":
        return SnapshotMode(startup, setting, snapshot_every_start=flags.snapshot_data, stream=flags.start_stream,
                            schemas_every_start=flags.snapshot_schema, schemas_on_loss=flags.snapshot_on_schema_error)
    return SnapshotMode(startup, setting, snapshot_every_start=mode == "always", stream=mode != "initial_only",
                        schemas_every_start=mode == "recovery", schemas_on_loss=mode == "recovery")
