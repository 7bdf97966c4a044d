"""The Schema Registry path through confluent-kafka's client: Confluent's framing unchanged
(``00`` + the 4-byte id + the Avro body), basic auth, TLS, retries, and clear errors.

Against a stand-in registry (tests/registry_helpers.py: no Schema Registry server can run
here) that answers Confluent's REST calls over HTTP and HTTPS."""

from __future__ import annotations

import pytest

from contract.codecs.serde import AvroWriter, ConfluentRegistry, RecordDecoder
from contract.errors import SerdeError
from tests.registry_helpers import StandInRegistry, self_signed_cert

SCHEMA = {"type": "record", "name": "Value", "namespace": "cdc.shop.t",
          "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": ["null", "string"], "default": None}]}
FAST = {"retries.wait.ms": 10, "retries.max.wait.ms": 50}


def test_confluent_framing_round_trips_through_the_registry_with_basic_auth_and_tls(tmp_path):
    cert, key = self_signed_cert(tmp_path)
    with StandInRegistry(user_info="cdc:s3cret", tls=(cert, key)) as reg:
        registry = ConfluentRegistry(reg.url, {"basic.auth.user.info": "cdc:s3cret", "ssl.ca.location": str(cert),
                                               **FAST})
        sid = registry.register("cdc.shop.t-value", SCHEMA)
        assert registry.register("cdc.shop.t-value", SCHEMA) == sid  # (the client caches it)
        assert registry.register("cdc.shop.u-value", SCHEMA) == sid  # one id per schema, as Confluent's
        data = AvroWriter(SCHEMA, b"\x00" + sid.to_bytes(4, "big")).encode({"id": 7, "name": "x"})
        assert data[:5] == b"\x00" + sid.to_bytes(4, "big")  # Confluent's wire framing
        reader = RecordDecoder(registry=ConfluentRegistry(reg.url, {"basic.auth.user.info": "cdc:s3cret",
                                                                    "ssl.ca.location": str(cert)}))
        assert reader.decode(data) == {"id": 7, "name": "x"}
        assert [m for m, _, status in reg.requests if status == 200] == ["POST", "POST", "GET"]


def test_retriable_answers_are_retried(tmp_path):  # noqa: ARG001
    with StandInRegistry(fail_first=2) as reg:
        assert ConfluentRegistry(reg.url, FAST).register("s-value", SCHEMA) == 1
        assert [status for _, _, status in reg.requests] == [503, 503, 200]


def test_a_refused_login_an_untrusted_certificate_and_bad_settings_are_clear_errors(tmp_path):
    cert, key = self_signed_cert(tmp_path)
    with StandInRegistry(user_info="cdc:s3cret") as reg:
        url = reg.url.replace("http://", "http://cdc:wrong@")
        with pytest.raises(SerdeError) as err:
            ConfluentRegistry(url, FAST).register("s-value", SCHEMA)
        assert f"schema registry {reg.url}: registering s-value" in str(err.value) and "Unauthorized" in str(err.value)
        assert "wrong" not in str(err.value)  # (no credentials in the message)
        with pytest.raises(SerdeError, match="schema id 99"):
            ConfluentRegistry(reg.url, {"basic.auth.user.info": "cdc:s3cret"}).schema(99)
    with StandInRegistry(tls=(cert, key)) as reg:
        with pytest.raises(SerdeError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            ConfluentRegistry(reg.url, {"max.retries": 0}).register("s-value", SCHEMA)
    with pytest.raises(SerdeError, match=r"Unrecognized properties: basic\.auth\.user \(kafka\.schema_registry_client\)"):
        ConfluentRegistry("http://127.0.0.1:1", {"basic.auth.user": "x"})


def test_registry_records_are_read_with_the_newest_version_of_their_subject(tmp_path):  # noqa: ARG001
    """As records of the ``_schemas`` topic path are read with their table's newest schema, a
    record framed by the registry is read with the newest version of its value subject: one
    written before a column was added has the column (null), a key is read as written."""
    from contract.envelope import envelope_schema
    from producer.events.avro_types import avro_fullname, row_record_schema
    from producer.table_schema import ColumnDef, TableDef

    def envelope(extra: bool) -> dict:
        cols = [ColumnDef(name="id", data_type="int", column_type="int(11)", nullable=False, ordinal=1,
                          numeric_precision=10, numeric_scale=0)]
        if extra:
            cols.append(ColumnDef(name="note", data_type="varchar", column_type="varchar(9)", nullable=True,
                                  ordinal=2, character_set="utf8mb4", char_max_length=9))
        ns = avro_fullname("cdc.shop.t")
        return envelope_schema(row_record_schema(TableDef("shop", "t", cols, ["id"]), f"{ns}.Value"), f"{ns}.Envelope")
    with StandInRegistry() as reg:
        registry = ConfluentRegistry(reg.url, FAST)
        old = registry.register("cdc.shop.t-value", envelope(False))
        key_id = registry.register("cdc.shop.t-key", SCHEMA)
        value = {"before": None, "after": {"id": 1}, "source": {
            "version": "0", "connector": "mysql", "name": "t", "ts_ms": 0, "snapshot": "false", "db": "shop",
            "sequence": None, "table": "t", "server_id": 1, "gtid": None, "file": "f", "pos": 4, "row": 0,
            "thread": None, "query": None}, "op": "c", "ts_ms": 0, "transaction": None,
            "position": "0" * 30, "snapshot_window": None}
        data = AvroWriter(envelope(False), b"\x00" + old.to_bytes(4, "big")).encode(value)
        key = AvroWriter(SCHEMA, b"\x00" + key_id.to_bytes(4, "big")).encode({"id": 1, "name": "k"})
        resolving = RecordDecoder(registry=ConfluentRegistry(reg.url, FAST), newest=lambda fp: None)
        assert resolving.decode(data)["after"] == {"id": 1}  # the newest version is the writer itself
        new = registry.register("cdc.shop.t-value", envelope(True))  # a column added: a new version
        newer = AvroWriter(envelope(True), b"\x00" + new.to_bytes(4, "big")).encode(
            {**value, "after": {"id": 2, "note": "n"}})
        # the running decoder asks for the subject's newest when a writer id new to it comes
        assert resolving.decode(newer)["after"] == {"id": 2, "note": "n"}
        assert resolving.decode(data)["after"] == {"id": 1, "note": None}
        fresh = RecordDecoder(registry=ConfluentRegistry(reg.url, FAST), newest=lambda fp: None)
        assert fresh.decode(data)["after"] == {"id": 1, "note": None}
        assert fresh.decode(key) == {"id": 1, "name": "k"}  # a key: as written
        plain = RecordDecoder(registry=ConfluentRegistry(reg.url, FAST))  # not a resolving decoder
        assert plain.decode(data)["after"] == {"id": 1}
