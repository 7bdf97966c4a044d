"""Configuration: one YAML file (``cdc.yaml``), validated, with environment overrides.

Every ``cdc`` command takes ``-c PATH`` (default ``./cdc.yaml``).  Any key can be
overridden from the environment as ``CDC__<SECTION>__<KEY>`` (double underscores
between levels, case-insensitive), for example ``CDC__SOURCE__HOST=mysql`` or
``CDC__KAFKA__BOOTSTRAP_SERVERS=kafka:9092``; that is how the docker compose file
configures the services.  Secrets should come from the environment
(``CDC__SOURCE__PASSWORD``) rather than from a file in the repository; values of the
form ``${VAR}`` are expanded from the environment too.

Declared here: what every part shares (``source``/``sources``, ``kafka``, ``producer``,
``snapshot``, ``spark``, what every sink follows in ``sinks``).  Each sink's section
(``sinks.<name>``) and the settings of a route (``routes``) are declared beside the sink
and the routes, and registered (:mod:`common.config_sections`): a configuration is
validated against the sections registered in the process that loads it.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    TypeAdapter,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from common.config_sections import config_checks, route_settings, sink_settings
from common.errors import ConfigError
from common.kafka.security import SECURITY_KEYS, security_settings

ENV_PREFIX = "CDC__"
DEFAULT_CONFIG_PATH = Path("cdc.yaml")


def qualified_name(v: str) -> str:
    """``v`` checked as a setting naming a table, ``database.table``."""
    if v.count(".") != 1 or not all(v.split(".")):
        raise ValueError("must be written 'database.table'")
    return v


def full_regex(v: str) -> str:
    """``v`` checked as a setting holding a regular expression."""
    try:
        re.compile(v)
    except re.error as exc:
        raise ValueError(f"not a regular expression: {v!r} ({exc})") from None
    return v


def read_secret_file(path: str, setting: str) -> str:
    """A secret from a file (as Docker secrets are mounted): its content without the final
    line break.  The error names the setting and the file, never a value."""
    try:
        return Path(path).read_text().rstrip("\r\n")
    except OSError as exc:
        raise ValueError(f"{setting}: cannot read {path}: {exc.strerror}") from None


class Section(BaseModel):
    """A section of the configuration: unknown keys refused, values validated when assigned
    too, and every ``<secret>_file`` setting read into its secret.  The sections the
    parts declare for themselves (:mod:`common.config_sections`) derive from it as well."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    #: The secrets read from ``<secret>_file`` files, by secret (so another file may replace them).
    _from_files: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _secret_files(self) -> "Section":
        """``<secret>_file``: the secret ``<secret>`` read from that file (given both, they must agree)."""
        fields = type(self).model_fields
        for name in fields:
            base = name[:-len("_file")]
            path = getattr(self, name) if name.endswith("_file") and base in fields else None
            if not path:
                continue
            secret = read_secret_file(path, name)
            given = getattr(self, base).get_secret_value()
            if given and given != secret and given != self._from_files.get(base):
                raise ValueError(f"give {base} or {name}, not both")
            self.__dict__[base] = SecretStr(secret)
            self._from_files[base] = secret
        return self

    @classmethod
    def setting_types(cls) -> dict[str, Any]:
        """The type of each setting of the section by name (what the environment's
        ``CDC__...`` keys are read against)."""
        return {name: field.annotation for name, field in cls.model_fields.items()}


TlsMode = Literal["disabled", "preferred", "required", "verify_ca", "verify_identity"]


class TlsConfig(Section):
    """TLS of the connections to a MySQL/MariaDB server, Debezium's ``database.ssl.mode``:
    ``disabled`` (plain text), ``preferred`` (TLS when the server offers it, unverified),
    ``required`` (TLS or no connection, unverified), ``verify_ca`` (and the server's
    certificate signed by ``ca``), ``verify_identity`` (and naming the host connected to).
    Files are PEM; ``cert``/``key``: a client certificate, for users created ``REQUIRE X509``."""

    mode: TlsMode = "preferred"
    ca: str = ""
    cert: str = ""
    key: str = ""


class SourceConfig(Section):
    """The MySQL/MariaDB server whose binlog is captured (connect as the CDC user)."""

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "cdc"
    password: SecretStr = SecretStr("")
    # The password read from this file instead (a Docker secret: /run/secrets/...).
    password_file: str = ""
    # TLS of every connection to the server: the binlog stream, chunk reads, signal and
    # marker writes, the start-up checks, cdc verify.
    ssl: TlsConfig = Field(default_factory=TlsConfig)
    # Replication client id; must differ from every other replica of the server.
    server_id: int = 5400
    # Databases/tables to capture: names or regular expressions (full match).
    # Tables are written ``db.table``.  Empty include list = everything not excluded.
    include_databases: list[str] = Field(default_factory=list)
    exclude_databases: list[str] = Field(default_factory=list)
    include_tables: list[str] = Field(default_factory=list)
    exclude_tables: list[str] = Field(default_factory=list)
    # Columns left out of events, per table: {"shop.users": ["password_hash"]}.
    exclude_columns: dict[str, list[str]] = Field(default_factory=dict)
    # Key columns for tables without a primary key: {"shop.log": ["id"]}.
    key_columns: dict[str, list[str]] = Field(default_factory=dict)
    # Debezium's column.include.list / column.exclude.list: regular expressions matched in
    # full (ignoring case) against ``db.table.column``; mutually exclusive.  A string is split
    # on commas, as Debezium splits its value (producer/column_controls.py applies them).
    column_include_list: list[str] = Field(default_factory=list)
    column_exclude_list: list[str] = Field(default_factory=list)
    # Debezium's message.key.columns: ``db.table:c1,c2;db2.t2:c`` (table parts are regexes):
    # the key of a table without a primary key, or instead of its primary key.
    message_key_columns: str = ""
    # Debezium's snapshot.select.statement.overrides: {"db.table": "SELECT * FROM db.table WHERE
    # <condition>"} (or the condition alone): the condition ANDed into every chunk SELECT of the
    # table's snapshots (producer/snapshot/select_overrides.py).
    snapshot_select_statement_overrides: dict[str, str] = Field(default_factory=dict)
    # Debezium's column mappers (producer/column_mappers.py), columns as regexes on ``db.table.column``
    # (a string is split on commas): column.truncate.to.N.chars as {N: [regex]}, column.mask.with.N.chars
    # as {N: [regex]}, column.mask.hash.<algorithm>.with.salt.<salt> (and .v2.) as a list of
    # {algorithm, salt, columns, strategy: v1|v2}, column.propagate.source.type and
    # datatype.propagate.source.type (regexes on ``db.table.TYPE``) as lists.  Checked at start.
    column_truncate_to_chars: dict[str, list[str] | str] = Field(default_factory=dict)
    column_mask_with_chars: dict[str, list[str] | str] = Field(default_factory=dict)
    column_mask_hash: list[dict[str, Any]] = Field(default_factory=list)
    column_propagate_source_type: list[str] = Field(default_factory=list)
    datatype_propagate_source_type: list[str] = Field(default_factory=list)
    # Binlog event filters: {"shop.orders": ["truncate", "drop"]} ignores those DDL.
    ignore_events: dict[str, list[str]] = Field(default_factory=dict)
    # gh-ost and pt-online-schema-change (producer/online_schema_change.py): ``follow`` leaves
    # the helper tables of a captured table ``t`` out (``_t_gho``, ``_t_ghc``, ``_t_ghk``,
    # ``_t_del``, ``_t_new``, ``_t_old``) and reads the cut-over RENAME as ``t`` altered in place;
    # ``capture`` treats them as any table (their rows captured when the lists match them, the
    # cut-over a rename of ``t`` away and a snapshot of the new ``t``).
    online_schema_change: Literal["follow", "capture"] = "follow"
    # Debezium-shaped signal table, ``db.table``.
    signal_table: str = "cdc_control.cdc_signal"
    # Where user signals come from (Debezium's signal.enabled.channels): rows inserted into
    # signal_table (source), records of <prefix>._signals keyed by producer.name (kafka).
    # Either can be off; the producer's own window marker rows are read from signal_table
    # whatever this says.  ``source,kafka`` is read as a list too (for the environment).
    signal_channels: list[Literal["source", "kafka"]] = Field(default_factory=lambda: ["source", "kafka"])
    connect_timeout_s: float = 10.0

    @field_validator("signal_table")
    @classmethod
    def _qualified(cls, v: str) -> str:
        return qualified_name(v)

    @field_validator("snapshot_select_statement_overrides")
    @classmethod
    def _override_tables(cls, v: dict[str, str]) -> dict[str, str]:
        for table in v:
            qualified_name(table)
        return v

    @field_validator("signal_channels", mode="before")
    @classmethod
    def _channel_list(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [c.strip() for c in v.split(",") if c.strip()]
        return list(dict.fromkeys(v)) if isinstance(v, list) else v

    @field_validator("column_truncate_to_chars", "column_mask_with_chars", mode="before")
    @classmethod
    def _mapper_keys(cls, v: Any) -> Any:
        return {str(k): c for k, c in v.items()} if isinstance(v, dict) else v

    @field_validator("column_include_list", "column_exclude_list", "column_propagate_source_type",
                     "datatype_propagate_source_type", mode="before")
    @classmethod
    def _column_list(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [c.strip() for c in v.split(",") if c.strip()]
        return v

    @field_validator("column_include_list", "column_exclude_list")
    @classmethod
    def _column_patterns(cls, v: list[str]) -> list[str]:
        for p in v:
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(f"{p!r} is not a valid regular expression: {exc}") from None
        return v

    @model_validator(mode="after")
    def _columns_exclusive(self) -> SourceConfig:
        if self.column_include_list and self.column_exclude_list:
            raise ValueError("column_include_list and column_exclude_list are mutually exclusive (as Debezium's "
                             "column.include.list and column.exclude.list): set one")
        return self


#: What a source's name may hold: it goes into topic names and producer names.
SOURCE_NAME = re.compile(r"[A-Za-z0-9_-]+")


class NamedSourceConfig(SourceConfig):
    """One of several source servers (``sources:``), each read by a producer of its own.

    ``name`` tells the shards of a route apart (the ``__source`` origin column) and is the
    producer's name for this source; ``topic_prefix`` is the ``kafka.topic_prefix`` of its
    topics (default ``<kafka.topic_prefix>_<name>``): every topic of the source (tables,
    markers, schemas, offsets, signals) is its own, as with a single source today."""

    name: str
    topic_prefix: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not SOURCE_NAME.fullmatch(v):
            raise ValueError(f"a source name holds letters, digits, '_' and '-' only, got {v!r}")
        return v

    @field_validator("topic_prefix")
    @classmethod
    def _prefix(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9._-]+", v):
            raise ValueError(f"a topic prefix holds Kafka's topic characters only ([A-Za-z0-9._-]), got {v!r}")
        return v


class KafkaSecurityConfig(Section):
    """``kafka.security``: how every Kafka client of the project talks to the brokers."""

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "SCRAM-SHA-512"
    sasl_username: str = ""
    sasl_password: SecretStr = SecretStr("")
    sasl_password_file: str = ""
    # TLS (SSL, SASL_SSL): the CA that signed the brokers' certificates (PEM; "": the system's),
    # a client certificate and key for brokers that authenticate clients by certificate.
    ca: str = ""
    cert: str = ""
    key: str = ""
    key_password: SecretStr = SecretStr("")
    key_password_file: str = ""
    # Check that a broker's certificate names the host connected to.
    verify_hostname: bool = True


#: The record batch compressions of ``kafka.compression`` (librdkafka's ``compression.type``).
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


class KafkaConfig(Section):
    bootstrap_servers: str = "127.0.0.1:9092"
    topic_prefix: str = "cdc"
    # Who writes the table topics the merge job and ``cdc verify --changelog`` read:
    # ``producer`` (ours: positions, window markers, schemas topic) or ``debezium`` (a
    # Debezium MySQL/MariaDB connector whose ``topic.prefix`` is ``topic_prefix``, with the
    # JSON converter and schemas; docs/debezium-input.md).
    input: Literal["producer", "debezium"] = "producer"
    # With ``input: debezium``: Debezium's Kafka signal topic (its ``signal.kafka.topic``, the
    # ``kafka`` channel in ``signal.enabled.channels``).  A statement in Debezium's schema change
    # topic that changed a table's rows without row events (a column added with a value, renamed
    # or retyped) then makes the merge job ask Debezium for an incremental snapshot of the table
    # there, as our producer takes one by itself; "" : a WARNING says to take it.
    debezium_signal_topic: str = ""
    # Confluent Schema Registry URL; when set, records use its wire framing.
    schema_registry_url: str | None = None
    # confluent-kafka's Schema Registry client settings besides the URL: basic.auth.user.info
    # ("user:password"), ssl.ca.location, ssl.certificate.location, ssl.key.location,
    # max.retries, retries.wait.ms, retries.max.wait.ms, timeout, ...
    schema_registry_client: dict[str, Any] = Field(default_factory=dict)
    # Kafka transactions for the producer (events + offsets committed atomically).
    transactions: bool = True
    # How every producer of the pipeline compresses its record batches (librdkafka's
    # ``compression.type``; Kafka Connect's ``producer.compression.type``): records of
    # ``producer.format: debezium-json`` repeat their schema in every record (about 4 KB a
    # change), which compression takes out of the broker's bytes.
    compression: Literal[COMPRESSIONS] = "none"
    # TLS and SASL of every client (docs/operations.md, "Secure deployment").
    security: KafkaSecurityConfig = Field(default_factory=KafkaSecurityConfig)
    # Extra librdkafka settings passed through to every client.
    client: dict[str, Any] = Field(default_factory=dict)
    partitions: int = 1
    replication_factor: int = 1

    @model_validator(mode="after")
    def _security_once(self) -> "KafkaConfig":
        if self.security.protocol != "PLAINTEXT":
            twice = sorted(k for k in self.client if k in SECURITY_KEYS)
            if twice:
                raise ValueError(f"kafka.client sets {', '.join(twice)}, which kafka.security sets: give them there")
        return self

    #: Where ``security`` came from, for messages: ``kafka.security``, or a part's own login
    #: (``producer.kafka_security``, ``spark.kafka_security``: :meth:`CDCConfig.for_part`).
    _security_setting: str = PrivateAttr(default="kafka.security")

    @property
    def security_setting(self) -> str:
        return self._security_setting

    def client_settings(self, *, secrets: dict[str, str] | None = None) -> dict[str, Any]:
        """librdkafka settings of every client, without ``bootstrap.servers``: ``security``'s,
        then ``client``'s.  ``secrets``: references to give instead of the secrets' values
        (:func:`common.kafka.security.security_settings`)."""
        return {**security_settings(self.security, secrets=secrets), **self.client}


class StartupConfig(Section):
    """Where a producer without a stored position starts reading the binlog."""

    mode: Literal["latest", "earliest", "initial", "position", "gtid", "timestamp"] = "latest"
    file: str | None = None
    pos: int | None = None
    gtid_set: str | None = None
    # ISO-8601 timestamp or epoch seconds.
    timestamp: str | None = None
    # When the stored position's binlog file is no longer on the server (purged while the
    # producer was down): stop with a message, or stream from the current position and
    # snapshot every captured table again with delete-missing (Debezium's when_needed).
    when_needed: Literal["stop", "snapshot"] = "stop"


class OutboxConfig(Section):
    """Debezium's outbox event router (``io.debezium.transforms.outbox.EventRouter``), its
    settings under our names (docs/configuration.md, "The outbox event router");
    ``producer/events/outbox.py`` applies and checks them."""

    # The outbox table, ``db.table`` (Debezium: the table its connector captures for the SMT).
    table: str
    id_column: str = "id"                         # table.field.event.id: the ``id`` header
    aggregate_id_column: str = "aggregateid"      # table.field.event.key: the record key
    aggregate_type_column: str = "aggregatetype"  # route.by.field: routes the record
    payload_column: str = "payload"               # table.field.event.payload: the record value
    topic_regex: str = "(?<routedByValue>.*)"     # route.topic.regex (Java syntax)
    topic_replacement: str = "outbox.event.${routedByValue}"  # route.topic.replacement
    tombstone_on_empty_payload: bool = False      # route.tombstone.on.empty.payload
    invalid_operation: Literal["warn", "error", "fatal"] = "warn"  # table.op.invalid.behavior
    # table.fields.additional.placement: ``column:header[:alias]`` / ``column:envelope[:alias]``;
    # a string is split on commas, as Debezium splits it.
    additional_placement: list[str] = Field(default_factory=list)

    @field_validator("table")
    @classmethod
    def _qualified(cls, v: str) -> str:
        return qualified_name(v)

    @field_validator("additional_placement", mode="before")
    @classmethod
    def _placements(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [c.strip() for c in v.split(",") if c.strip()]
        return v


class ProducerConfig(Section):
    format: Literal["avro", "json", "debezium-json"] = "avro"
    # The producer's own Kafka login (a user whose ACLs let it write its topics), instead of
    # kafka.security: a secure deployment gives each part its own (docs/operations.md).
    kafka_security: KafkaSecurityConfig | None = None
    # Debezium's tombstones.on.delete: a record with the key and no value after each delete
    # (null: on with debezium-json, as Debezium by default, off with avro and json).
    tombstones_on_delete: bool | None = None
    startup: StartupConfig = Field(default_factory=StartupConfig)
    # When Kafka lost the producer's history (a position kept in the state directory that
    # Kafka does not have): stop with a message, re-publish from the kept position
    # (resume), or that and a snapshot of every captured table (snapshot).
    lost_history: Literal["stop", "resume", "snapshot"] = "stop"
    # Records per Kafka transaction / offset commit (the race's Debezium engine batch,
    # max.batch.size, is the same number).  Each commit waits for every record's
    # acknowledgement, so a smaller batch stalls the stream more often: 5,000 made the
    # stream 20% slower than 20,480 (docs/performance.md); under a trickle
    # ``batch_interval_s`` commits first either way.
    batch_size: int = 20480
    # Longest time (s) a batch stays open before it is committed.
    batch_interval_s: float = 0.1
    heartbeat_interval_s: float = 0.0
    transaction_metadata: bool = False
    # Write TRUNCATE TABLE as Debezium's truncate event (``op: t``) on the table topic
    # (Debezium skips them by default; the sinks follow a TRUNCATE either way, by marker).
    emit_truncate: bool = True
    # Debezium's skipped.operations: the change events not written, of c (inserts), u
    # (updates), d (deletes), t (truncates); ``none`` (or empty): none skipped.  A string is
    # split on commas.  Snapshot reads (r) are never skipped.
    skipped_operations: list[Literal["c", "u", "d", "t"]] = Field(default_factory=list)
    # Prometheus metrics and the /healthz and /readyz probes on this port; none when unset.
    metrics_port: int | None = None
    # /healthz answers 503 when the producer's loop has not moved for this long (s).
    health_stall_s: float = Field(300.0, gt=0)
    # Name of this producer (Debezium's topic.prefix / server name); keys its offsets.
    name: str = "cdc"
    # Debezium's handling modes, its names and values (docs/configuration.md): DECIMAL as Connect's
    # Decimal, a double or its text; the temporal types as Debezium's (microseconds) or Kafka
    # Connect's own (milliseconds); BIGINT UNSIGNED exact (a Decimal of 20 digits: Debezium's
    # precise, our default) or a long that wraps above 2**63-1 (Debezium's default); the binary
    # types as bytes or text.
    decimal_handling_mode: Literal["precise", "double", "string"] = "precise"
    time_precision_mode: Literal["adaptive_time_microseconds", "connect"] = "adaptive_time_microseconds"
    bigint_unsigned_handling_mode: Literal["precise", "long"] = "precise"
    binary_handling_mode: Literal["bytes", "base64", "base64-url-safe", "hex"] = "bytes"
    # Debezium's outbox event router: the outbox table's inserts routed to topics by aggregate
    # type, keyed by aggregate id, the payload as the value (null: off).
    outbox: OutboxConfig | None = None

    @field_validator("skipped_operations", mode="before")
    @classmethod
    def _skipped(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [c.strip() for c in v.split(",") if c.strip()]
        if isinstance(v, list):
            v = [str(c).strip().lower() for c in v]
            if "none" in v:
                if len(v) > 1:
                    raise ValueError(f"'none' skips nothing and goes alone, got {v}")
                return []
            return list(dict.fromkeys(v))
        return v

    @property
    def tombstones(self) -> bool:
        """Whether deletes are followed by a tombstone (``tombstones_on_delete``, by format)."""
        if self.tombstones_on_delete is None:
            return self.format == "debezium-json"
        return self.tombstones_on_delete


#: Debezium's ``snapshot.mode`` values (docs/configuration.md, "snapshot.mode"; producer/snapshot_mode.py
#: maps them onto ``producer.startup``).
SNAPSHOT_MODES = ("initial", "initial_only", "no_data", "when_needed", "always", "recovery", "configuration_based")
#: Values older Debezium versions took, and what replaced them in Debezium 3.
REMOVED_SNAPSHOT_MODES = {"schema_only": "no_data", "never": "no_data", "schema_only_recovery": "recovery"}


#: ``snapshot.new_tables``: what a start does with the tables that newly match the capture lists
#: (producer/new_tables.py; docs/operations.md, "Newly added tables").
NEW_TABLES_MODES = ("incremental", "blocking", "off")


class ConfigurationBasedSnapshot(Section):
    """Debezium's ``snapshot.mode.configuration.based.*``: what ``snapshot.mode:
    configuration_based`` does on every start (Debezium's defaults: all false)."""

    snapshot_data: bool = False             # .snapshot.data: snapshot every captured table on every start
    snapshot_schema: bool = False           # .snapshot.schema: publish every captured table's schemas on every start
    start_stream: bool = False              # .start.stream: stream after the snapshot (false: stop once it is done)
    snapshot_on_schema_error: bool = False  # .snapshot.on.schema.error: the schemas topic lost: publish them again
    snapshot_on_data_error: bool = False    # .snapshot.on.data.error: the stored position purged: snapshot again


class SnapshotConfig(Section):
    # Debezium's snapshot.mode (null: producer.startup alone says how a producer starts).
    mode: Literal[SNAPSHOT_MODES] | None = None
    # With mode: configuration_based, Debezium's snapshot.mode.configuration.based.* flags.
    configuration_based: ConfigurationBasedSnapshot | None = None
    chunk_size: int = Field(8192, gt=0)
    parallelism: int = Field(1, gt=0)
    # Snapshot a table by itself after DDL that changed its rows without row events
    # (a column added with a default, a generated column, a column renamed or retyped).
    after_ddl: bool = True
    # No writes to the source: chunk windows bounded by GTID sets read before and after each chunk
    # SELECT instead of marker rows (issue 14); signals from the Kafka channel.
    read_only: bool = False
    # Tables that start to match the capture lists (the lists changed, the producer restarted):
    # snapshotted by themselves, incrementally or blocking, once; or not (off: a WARNING names
    # them). A table created while the lists match it is streamed from its first row either way.
    new_tables: Literal[NEW_TABLES_MODES] = "incremental"

    @field_validator("mode", mode="before")
    @classmethod
    def _debezium_mode(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = v.strip().lower()  # (Debezium reads the value case-insensitively)
            if v in REMOVED_SNAPSHOT_MODES:
                raise ValueError(f"snapshot.mode {v!r} was removed in Debezium 3: use "
                                 f"{REMOVED_SNAPSHOT_MODES[v]!r} (docs/configuration.md, \"snapshot.mode\")")
        return v

    @field_validator("new_tables", mode="before")
    @classmethod
    def _new_tables(cls, v: Any) -> Any:
        if isinstance(v, bool) and not v:  # (YAML's unquoted off)
            return "off"
        if isinstance(v, str):
            v = v.strip().lower()
            if v not in NEW_TABLES_MODES:
                raise ValueError(f"snapshot.new_tables {v!r} is not one of {', '.join(NEW_TABLES_MODES)}")
        return v

    @model_validator(mode="after")
    def _configuration_based(self) -> "SnapshotConfig":
        if self.configuration_based is not None and self.mode != "configuration_based":
            raise ValueError(f"snapshot.configuration_based is given, but snapshot.mode is {self.mode!r}: it applies "
                             "to snapshot.mode: configuration_based only")
        return self


class SchemaChangeRule(Section):
    """How the sinks and the clean changelog follow the DDL of the tables ``tables`` (a
    regular expression matched against ``db.table`` in full); the first rule that matches
    a table applies, a table no rule matches gets the defaults."""

    tables: str = ".*"
    # A table's columns added or retyped: evolve (the sink tables and the changelog follow),
    # ignore (they keep the columns they have; the changelog keeps the schema the table
    # first had), stop (the merge job stops with a message naming the table and the change).
    columns: Literal["evolve", "ignore", "stop"] = "evolve"
    # DROP TABLE: keep the sink tables (and the changelog topic) or drop them.
    drop_table: Literal["keep", "drop"] = "keep"
    # RENAME TABLE: rename the sink tables, keep the old ones, or drop them.  The renamed
    # table is snapshotted by the producer, so its new sink tables fill either way.
    rename_table: Literal["rename", "keep", "drop"] = "rename"

    @field_validator("tables")
    @classmethod
    def _regex(cls, v: str) -> str:
        return full_regex(v)

    def matches(self, db: str, table: str) -> bool:
        return re.fullmatch(self.tables, f"{db}.{table}") is not None


@functools.cache
def _sink_sections(registered: tuple[tuple[str, type[BaseModel]], ...]) -> type[BaseModel]:
    """One model with a section per registered sink (its settings by default), refusing any
    other name: what the sections under ``sinks`` are validated with."""
    return create_model("sinks", __config__=ConfigDict(extra="forbid"),
                        **{name: (model, Field(default_factory=model)) for name, model in registered})


@functools.cache
def _entries_of(model: type[BaseModel]) -> TypeAdapter[list[Any]]:
    """What validates a list of ``model`` (the entries of ``routes``), naming each entry's index."""
    return TypeAdapter(list[model])


class SinksConfig(Section):
    """``sinks``: what every table sink and the clean changelog follow (how a table's DDL is
    followed, when tombstones go), and each sink's own section ``sinks.<name>``, validated
    into the settings its module registered (:func:`common.config_sections.register_sink_settings`);
    a name no sink registered is refused like any unknown key.  A sink's section is read as
    an attribute (``cfg.sinks.<name>.<key>``)."""

    # The sinks' sections are kept as the model's extra values, each validated (below).
    model_config = ConfigDict(extra="allow", validate_assignment=True)

    schema_changes: list[SchemaChangeRule] = Field(default_factory=list)
    # How often (seconds) the merge job drops the table sinks' tombstones that no replay can
    # reach any more (spark_jobs/maintenance/tombstone_horizon.py); 0: never (they then grow with deletes).
    tombstone_purge_s: float = Field(60.0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _registered_sections(cls, data: Any) -> Any:
        """Each sink's section validated into its registered model (the defaults when absent)."""
        if not isinstance(data, dict):
            return data
        shared = {k: v for k, v in data.items() if k in cls.model_fields}
        sections = _sink_sections(tuple(sink_settings().items())).model_validate(
            {k: v for k, v in data.items() if k not in cls.model_fields})
        return {**shared, **dict(sections)}

    @classmethod
    def setting_types(cls) -> dict[str, Any]:
        return {**super().setting_types(), **sink_settings()}

    def sections(self) -> dict[str, BaseModel]:
        """Each sink's section by name, in the order the sinks registered."""
        return {name: section for name, section in (self.model_extra or {}).items() if name in sink_settings()}

    def schema_rule(self, db: str, table: str) -> SchemaChangeRule:
        """The schema change rule of ``db.table`` (the first that matches, or the defaults)."""
        for rule in self.schema_changes:
            if rule.matches(db, table):
                return rule
        return SchemaChangeRule()


class SparkConfig(Section):
    master: str = "local[*]"
    checkpoint_dir: str = ".cdc/checkpoints"
    # The micro-batch trigger: a batch starts at most this often, and as soon as the last one
    # ended when records are waiting.
    trigger_interval_s: float = 0.1
    # With nothing new to read, the source waits up to this long for a record before telling
    # Spark so (a fetch the broker holds until records are committed): a batch starts as soon
    # as they are, while an idle job asks no more often than this (0: no wait, one look a
    # trigger).  The cdc-kafka source only.
    idle_wait_s: float = Field(0.5, ge=0)
    # "python": the confluent-kafka data source; "jvm": Spark's own kafka source.
    kafka_source: Literal["python", "jvm"] = "python"
    max_offsets_per_trigger: int | None = None
    # A micro-batch of at most this many records is merged in the driver's own process, one
    # range after the other, instead of as a Spark job on the executors: a Spark job has a
    # fixed cost (scheduling, the tasks' start in Python workers: ~90-200 ms on two cores,
    # docs/merge-performance.md, "The latency floor") that a small batch pays for little
    # work.  The same merge and the same transactions either way; 0: always a Spark job.
    # (The cdc-kafka source only: Spark's own kafka source is read through the DataFrame.)
    inline_batch_records: int = Field(10_000, ge=0)
    # Stop (true, as Spark's failOnDataLoss) when Kafka no longer holds records the job has
    # not read (topic deleted or recreated, retention, a checkpoint past the log's end);
    # false: carry on from what Kafka holds, counting what was lost.
    fail_on_data_loss: bool = True
    # Prometheus metrics and the /healthz and /readyz probes of the merge job; none when unset.
    metrics_port: int | None = None
    # /healthz answers 503 when a micro-batch has run longer than this (s).
    health_stall_s: float = Field(3600.0, gt=0)
    # Spark's web UI of the merge job's driver on this port (4040 is Spark's usual); off when unset.
    ui_port: int | None = None
    # The merge job's own Kafka login (a user whose ACLs let it read its inputs and write its
    # outputs), instead of kafka.security.
    kafka_security: KafkaSecurityConfig | None = None


class CapturedSource(BaseModel):
    """A source as the pipeline sees it (:meth:`CDCConfig.captured_sources`): its name, its
    settings, the topic prefix of its topics and the name of its producer."""

    model_config = ConfigDict(frozen=True)

    name: str
    config: SourceConfig
    topic_prefix: str
    producer_name: str


class CDCConfig(Section):
    # One source server (``source``), or several (``sources``, each with a name): not both.
    source: SourceConfig = Field(default_factory=SourceConfig)
    sources: list[NamedSourceConfig] = Field(default_factory=list)
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    producer: ProducerConfig = Field(default_factory=ProducerConfig)
    snapshot: SnapshotConfig = Field(default_factory=SnapshotConfig)
    sinks: SinksConfig = Field(default_factory=SinksConfig)
    # Shards merged into one target table (docs/sharding.md): the first route that matches applies.
    # Each entry is validated into the settings the routes registered (common.config_sections).
    routes: list[Any] = Field(default_factory=list)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    state_dir: str = ".cdc"

    @field_validator("routes", mode="before")
    @classmethod
    def _registered_routes(cls, v: Any) -> Any:
        """Each entry of ``routes`` validated into the registered route settings."""
        model = route_settings()
        if model is None:
            if v:
                raise ValueError("no module registered the routes' settings in this process")
            return v
        return _entries_of(model).validate_python(v)

    @model_validator(mode="after")
    def _sources_and_routes(self) -> "CDCConfig":
        if self.sources and self.source != SourceConfig():
            raise ValueError("give either 'source' (one server) or 'sources' (several, each with a name), not both")
        names = [s.name for s in self.sources]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"sources: the name {dup[0]!r} is given twice")
        captured = self.captured_sources()
        prefixes = [c.topic_prefix for c in captured]
        for i, a in enumerate(prefixes):
            for b in prefixes[i + 1:]:
                if a == b or a.startswith(b + ".") or b.startswith(a + "."):
                    raise ValueError(f"sources: the topic prefixes {a!r} and {b!r} would mix the sources' topics")
        if self.kafka.input == "debezium":
            refused = [what for what, given in (("routes", self.routes), ("sources", self.sources),
                                                ("kafka.schema_registry_url", self.kafka.schema_registry_url))
                       if given]
            refused += [f"sinks.schema_changes 'columns: {r.columns}' (for {r.tables})"
                        for r in self.sinks.schema_changes if r.columns != "evolve"]
            if refused:
                raise ValueError(f"kafka.input: debezium (topics written by Debezium) works without "
                                 f"{', '.join(refused)} for now (docs/debezium-input.md)")
        for check in config_checks():  # those of the parts' own sections (the routes' sources)
            check(self)
        return self

    def captured_sources(self) -> list[CapturedSource]:
        """Every source server with its name, topic prefix and producer name: the entries of
        ``sources``, or ``source`` alone, named ``producer.name`` and using
        ``kafka.topic_prefix`` (today's single-source configuration, unchanged)."""
        if not self.sources:
            return [CapturedSource(name=self.producer.name, config=self.source, topic_prefix=self.kafka.topic_prefix,
                                   producer_name=self.producer.name)]
        return [CapturedSource(name=s.name, config=s, producer_name=s.name,
                               topic_prefix=s.topic_prefix or f"{self.kafka.topic_prefix}_{s.name}")
                for s in self.sources]

    #: The source this configuration is the view of (:meth:`for_source`); None as loaded.
    _of_source: str | None = PrivateAttr(default=None)

    @property
    def source_name(self) -> str | None:
        """The name of the ``sources`` entry this configuration is the view of
        (:meth:`for_source`), None for a configuration as loaded or with ``source`` alone."""
        return self._of_source

    def for_source(self, name: str | None = None) -> "CDCConfig":
        """The configuration of the producer of one source, as a single-source configuration:
        ``source`` holds that entry's settings, ``kafka.topic_prefix`` its topic prefix,
        ``producer.name`` its producer name (so offsets, the transactional id, the signal
        topic's key and ``offsets/<name>.json`` are its own), ``producer.metrics_port`` is
        the configured port plus the entry's index (one port per producer); no ``sources``,
        no ``routes``.  Everything that reads one server (the producer, ``cdc snapshot``,
        ``cdc status``, verify) works on this view.

        With ``source`` alone the configuration itself is its only source's (``name`` None or
        ``producer.name``).  ``name`` None with several ``sources``: a :class:`ConfigError`
        listing them (a command then needs ``--source NAME``)."""
        if not self.sources:
            if name is not None and name != self.producer.name:
                self.captured_source(name)  # raises, naming the one source
            source = self._without_sink_databases(self.source)
            if source is self.source:
                return self
            view = self.model_copy(deep=True, update={"source": source})
            view._of_source = self._of_source
            return view
        if name is None:
            if len(self.sources) > 1:
                raise ConfigError(f"several sources are configured ({', '.join(s.name for s in self.sources)}): "
                                  f"name one with --source NAME")
            name = self.sources[0].name
        captured = self.captured_source(name)
        index = [s.name for s in self.sources].index(name)
        entry = captured.config.model_dump(exclude={"name", "topic_prefix"})
        producer = self.producer.model_copy(deep=True, update={
            "name": captured.producer_name,
            "metrics_port": None if self.producer.metrics_port is None else self.producer.metrics_port + index})
        view = self.model_copy(deep=True, update={
            "source": self._without_sink_databases(SourceConfig.model_validate(entry)), "sources": [], "routes": [],
            "producer": producer,
            "kafka": self.kafka.model_copy(deep=True, update={"topic_prefix": captured.topic_prefix})})
        view._of_source = name
        return view

    def sink_databases_on(self, source: SourceConfig) -> list[str]:
        """The databases that enabled sinks write into on the server of ``source`` (a sink
        section with ``host``, ``port`` and ``database`` naming that server): the merge job's
        own writes, which are never captured (:meth:`for_source` excludes them)."""
        out = []
        for section in self.sinks.sections().values():
            database = getattr(section, "database", None)
            if (getattr(section, "enabled", False) and isinstance(database, str) and database
                    and same_server((getattr(section, "host", None), getattr(section, "port", None)),
                                    (source.host, source.port))):
                out.append(database)
        return out

    def _without_sink_databases(self, source: SourceConfig) -> SourceConfig:
        """``source`` with the sinks' databases on its server added to ``exclude_databases``
        (``source`` itself when there are none, or they are excluded already): capturing the
        sink tables would feed the merge job its own writes."""
        extra = [re.escape(db) for db in self.sink_databases_on(source)
                 if re.escape(db) not in source.exclude_databases and db not in source.exclude_databases]
        if not extra:
            return source
        return source.model_copy(update={"exclude_databases": [*source.exclude_databases, *extra]})

    def for_part(self, part: Literal["producer", "merge"]) -> "CDCConfig":
        """This configuration as the producer (``producer.kafka_security``) or the merge job
        (``spark.kafka_security``) logs in to Kafka: that part's own login in ``kafka.security``
        when it has one, else the configuration itself.  The operator tools (``cdc status``,
        ``verify``, ``snapshot``) log in with ``kafka.security``."""
        own = self.producer.kafka_security if part == "producer" else self.spark.kafka_security
        if own is None:
            return self
        kafka = self.kafka.model_copy(deep=True, update={"security": own})
        kafka._security_setting = "producer.kafka_security" if part == "producer" else "spark.kafka_security"
        view = self.model_copy(deep=True, update={"kafka": kafka})
        view._of_source = self._of_source
        return view

    def captured_source(self, name: str) -> CapturedSource:
        """The source named ``name`` (see :meth:`captured_sources`)."""
        for c in self.captured_sources():
            if c.name == name:
                return c
        raise ConfigError(f"no source named {name!r} (sources: {', '.join(c.name for c in self.captured_sources())})")


_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "ip6-localhost"})


def same_server(a: tuple[Any, Any], b: tuple[Any, Any]) -> bool:
    """Whether two ``(host, port)`` name the same server: the same port, and the same host
    name (case aside) or both a name of this machine's loopback."""
    (host_a, port_a), (host_b, port_b) = a, b
    if port_a != port_b or not isinstance(host_a, str) or not isinstance(host_b, str):
        return False
    host_a, host_b = host_a.lower().strip("[]"), host_b.lower().strip("[]")
    return host_a == host_b or (_is_loopback(host_a) and _is_loopback(host_b))


def _is_loopback(host: str) -> bool:
    return host in _LOOPBACK or host.startswith("127.")


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


#: Keys whose values are not expanded from the environment: their own ``${name}`` syntax
#: (``producer.outbox.topic_replacement``: Debezium's ``${routedByValue}``, a regex group).
_VERBATIM = {("outbox", "topic_replacement")}


def _expand(value: Any, environ: dict[str, str], path: tuple[str, ...] = ()) -> Any:
    if path[-2:] in _VERBATIM:
        return value
    if isinstance(value, str):
        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in environ:
                raise ConfigError(f"configuration refers to ${{{name}}} but that environment variable is not set")
            return environ[name]
        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand(v, environ, (*path, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, environ, path) for v in value]
    return value


def config_env_keys(model: type[Section] = CDCConfig, prefix: str = ENV_PREFIX) -> set[str]:
    """Every environment variable name that maps onto a configuration key (the registered
    sections' keys among them)."""
    keys: set[str] = set()
    for name, ann in model.setting_types().items():
        env = f"{prefix}{name.upper()}"
        if isinstance(ann, type) and issubclass(ann, Section):
            keys |= config_env_keys(ann, env + "__")
        else:
            keys.add(env)
    return keys


def _string_field(path: list[str]) -> bool:
    """Whether the configuration key at ``path`` holds a plain string (or secret)."""
    model: Any = CDCConfig
    for part in path:
        model = model.setting_types()[part]
    return model in (str, SecretStr, str | None)


def _apply_env(data: dict[str, Any], environ: dict[str, str]) -> dict[str, Any]:
    valid = config_env_keys()
    for env_name, raw in environ.items():
        if not env_name.upper().startswith(ENV_PREFIX):
            continue
        if env_name.upper() not in valid:
            raise ConfigError(f"environment variable {env_name} does not name a configuration key")
        path = env_name[len(ENV_PREFIX):].lower().split("__")
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
        if _string_field(path) or raw == "":
            node[path[-1]] = raw  # passwords, DSNs, hosts: taken verbatim
        else:
            # YAML parsing turns "5", "true", "[a, b]", "{k: v}" into the right types.
            try:
                node[path[-1]] = yaml.safe_load(raw)
            except yaml.YAMLError as exc:
                raise ConfigError(f"environment variable {env_name}: not a valid value: {exc}") from None
    return data


def load_config(path: str | os.PathLike[str] | None = None, *, environ: dict[str, str] | None = None,
                required: bool = True) -> CDCConfig:
    """Read, expand and validate the configuration file (``-c PATH``)."""
    environ = dict(os.environ if environ is None else environ)
    p = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    data: dict[str, Any] = {}
    if p.exists():
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p}: the top level must be a mapping of sections")
        data = loaded
    elif required and not any(k.upper().startswith(ENV_PREFIX) for k in environ):
        raise ConfigError(
            f"configuration file {p} not found: pass -c PATH, or run 'cdc stack up' "
            f"which writes a complete one to <state-dir>/cdc.yaml")
    data = _apply_env(_expand(data, environ), environ)
    try:
        return CDCConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"{p}: invalid configuration:"]
        for err in exc.errors():
            where = ".".join(str(x) for x in err["loc"])
            lines.append(f"  {where}: {err['msg']}" if where else f"  {err['msg']}")
        raise ConfigError("\n".join(lines)) from None


def dump_config(cfg: CDCConfig) -> str:
    """YAML text of a configuration, secrets included (for files in the state dir only); a
    secret read from a file (``<secret>_file``) is written as that file's name only."""
    def plain(v: Any) -> Any:
        if isinstance(v, SecretStr):
            return v.get_secret_value()
        if isinstance(v, dict):
            return {k: "" if v.get(f"{k}_file") else plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v
    return yaml.safe_dump(plain(cfg.model_dump()), sort_keys=False)


def write_config(cfg: CDCConfig, path: str | os.PathLike[str]) -> Path:
    """Write ``cfg`` as YAML to ``path``, readable by its owner only (it holds
    credentials), replacing the file atomically."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(dump_config(cfg))
    os.replace(tmp, path)
    return path
