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
