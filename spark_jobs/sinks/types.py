"""The column types of the sink tables: each column kind's PostgreSQL and MySQL/MariaDB type.

=================  =======================================  ==========================  =======================
kind               Avro (connect.name)                       PostgreSQL                  MySQL / MariaDB
=================  =======================================  ==========================  =======================
smallint           int, connect.type int16/int8              smallint                    SMALLINT
int                int                                       integer                     INT
long               long                                      bigint                      BIGINT
decimal            bytes decimal(p,s) (BIGINT UNSIGNED =     numeric(p,s)                DECIMAL(p,s)
                   decimal(20,0))
float              float                                     real                        FLOAT
double             double                                    double precision            DOUBLE
boolean            boolean (BIT(1))                          boolean                     BIT(1)
bits               bytes io.debezium.data.Bits (length n)    bit(n)                      BIT(n)
string             string (also UUID/INET text)              text                        LONGTEXT / VARCHAR(k)
bytes              bytes / fixed                             bytea                       LONGBLOB / VARBINARY(k)
enum, set          string io.debezium.data.Enum / EnumSet    text                        LONGTEXT / VARCHAR(k)
json               string io.debezium.data.Json              jsonb                       JSON
date               int io.debezium.time.Date (days)          date                        DATE
time               long io.debezium.time.MicroTime (us)      interval                    TIME(6)
timestamp_ms       long io.debezium.time.Timestamp (ms)      timestamp(3) without tz     DATETIME(3)
timestamp_us       long io.debezium.time.MicroTimestamp      timestamp(6) without tz     DATETIME(6)
zoned_timestamp    string io.debezium.time.ZonedTimestamp    timestamp(6) with tz        TIMESTAMP(6) NULL
year               int io.debezium.time.Year                 smallint                    YEAR
geometry, point    record Geometry {wkb, srid} / Point       bytea (the WKB)             LONGBLOB (the WKB)
float_vector       array of float io.debezium.data.FloatVector  real[]                 JSON (an array)
=================  =======================================  ==========================  =======================

Notes:

* ``MicroTime`` may be negative or above 24 h (MySQL TIME spans +-838:59:59), hence
  ``interval`` in PostgreSQL.
* The MySQL string/binary types of *key* columns are ``VARCHAR``/``VARBINARY`` sized to fit
  InnoDB's 3072-byte key limit (the Avro schema carries no lengths), see :func:`mysql_type`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from common.errors import UnsupportedType
from contract.type_table import SINK_KINDS, SinkKind
from spark_jobs.sinks.layout import as_sink_column

__all__ = ["postgres_type", "mysql_type", "mysql_key_types"]


def postgres_type(col: Any) -> str:
    """PostgreSQL column type (in ``format_type`` spelling) of a SinkColumn or Avro field."""
    c = as_sink_column(col)
    if c.kind == "decimal":
        return f"numeric({c.precision},{c.scale})"
    if c.kind == "bits":
        return f"bit({c.length})"
    pg = _row(c).postgres
    if pg is None:
        raise UnsupportedType(f"column {c.name!r}: no PostgreSQL type for kind {c.kind!r}")
    return pg


#: Bytes an InnoDB index entry may use (3072 with the DYNAMIC row format), with some room left.
MYSQL_KEY_BYTES = 3000


def _row(c: Any) -> SinkKind:
    """The type table's row of a sink column's kind."""
    try:
        return SINK_KINDS[c.kind]
    except KeyError:
        raise UnsupportedType(f"column {c.name!r}: no sink type for kind {c.kind!r}") from None


def mysql_key_types(key: Sequence[Any]) -> dict[str, str]:
    """MySQL types of key columns: variable-length ones share what InnoDB's key limit leaves.

    ``VARCHAR(n)`` counts 4 bytes a character (utf8mb4).  With one string key column that is
    ``VARCHAR(750)``; longer source keys cannot be stored (the Avro schema has no lengths).
    """
    cols = [as_sink_column(c) for c in key]
    fixed = 0
    variable = []
    for c in cols:
        if _row(c).variable is not None:
            variable.append(c)
        elif c.kind == "decimal":
            fixed += (c.precision or 10) // 2 + 1
        elif c.kind == "bits":
            fixed += ((c.length or 1) + 7) // 8
        else:
            fixed += _row(c).mysql_key_bytes or 8
    out = {c.name: mysql_type(c) for c in cols if c not in variable}
    if variable:
        share = max(1, (MYSQL_KEY_BYTES - fixed - 2 * len(variable)) // len(variable))
        for c in variable:
            out[c.name] = f"VARCHAR({max(1, share // 4)})" if _row(c).variable == "text" else f"VARBINARY({share})"
    return out


def mysql_type(col: Any) -> str:
    """MySQL/MariaDB column type of a SinkColumn or Avro field (non-key form, see :func:`mysql_key_types`)."""
    c = as_sink_column(col)
    if c.kind == "decimal":
        if not 1 <= (c.precision or 0) <= 65 or not 0 <= (c.scale or 0) <= 30:
            raise UnsupportedType(f"column {c.name!r}: DECIMAL({c.precision},{c.scale}) exceeds MySQL's limits")
        return f"DECIMAL({c.precision},{c.scale})"
    if c.kind == "bits":
        if not 1 <= (c.length or 0) <= 64:
            raise UnsupportedType(f"column {c.name!r}: BIT({c.length}) exceeds MySQL's limit of 64")
        return f"BIT({c.length})"
    mysql = _row(c).mysql
    if mysql is None:
        raise UnsupportedType(f"column {c.name!r}: no MySQL type for kind {c.kind!r}")
    return mysql
