"""The embedded Kafka's configuration and the secure stack's ACLs, as data (no broker)."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AclOperation, AclPermissionType, ResourcePatternType, ResourceType
from hypothesis import given, strategies as st

from cdc.stack.kafka_broker import BrokerSecurity, new_cluster_id, node_properties, secret_reference
from cdc.stack.kafka_users import merge_acls, producer_acls


def test_cluster_ids_are_kafkas_shape_and_never_look_like_an_option():
    ids = {new_cluster_id() for _ in range(5000)}
    assert len(ids) == 5000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


@given(st.lists(st.tuples(st.integers(1024, 65535), st.integers(1024, 65535)), min_size=1, max_size=3, unique=True))
def test_every_node_is_a_voter_and_replication_follows_the_cluster_size(port_pairs):
    ports = {i: pair for i, pair in enumerate(port_pairs, start=1)}
    n = len(ports)
    for node_id, (port, controller) in ports.items():
        props = node_properties(node_id, ports, Path("/data"), replication=n)
        assert props["node.id"] == str(node_id) and props["process.roles"] == "broker,controller"
        assert props["controller.quorum.voters"] == ",".join(f"{i}@127.0.0.1:{c}" for i, (_, c) in ports.items())
        assert f"PLAINTEXT://127.0.0.1:{port}" in props["listeners"]
        assert f"CONTROLLER://127.0.0.1:{controller}" in props["listeners"]
        assert props["default.replication.factor"] == props["offsets.topic.replication.factor"] == str(n)
        assert props["min.insync.replicas"] == props["transaction.state.log.min.isr"] == str(min(2, n))
        assert props["auto.create.topics.enable"] == "false" and props["unclean.leader.election.enable"] == "false"


def test_a_secure_node_holds_references_to_its_secrets_never_the_secrets(tmp_path):
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    files = {}
    for name in ("store", "broker", "alice"):
        files[name] = secrets / name
        files[name].write_text(f"the-{name}-secret")
    security = BrokerSecurity(str(tmp_path / "store.p12"), str(files["store"]), str(tmp_path / "ca.pem"),
                              str(files["broker"]), {"alice": str(files["alice"])})
    props = node_properties(1, {1: (9092, 9093)}, tmp_path / "data", replication=1, security=security)
    text = "\n".join(f"{k}={v}" for k, v in props.items())
    assert not any(f"the-{name}-secret" in text for name in files)
    assert props["ssl.keystore.password"] == secret_reference(str(files["store"])) == f"${{dir:{secrets}:store}}"
    assert f'user_alice="${{dir:{secrets}:alice}}"' in props["listener.name.client.plain.sasl.jaas.config"]
    assert props["listener.security.protocol.map"] == "CLIENT:SASL_SSL,CONTROLLER:SASL_SSL"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN"
    assert props["allow.everyone.if.no.acl.found"] == "false" and props["super.users"] == "User:broker"


def _can(bindings, op, topic: str) -> bool:
    """Whether ``bindings`` let their user do ``op`` on ``topic`` (Kafka's rule: a DENY that
    matches wins, else an ALLOW that matches)."""
    def matches(b):
        if b.restype != ResourceType.TOPIC or b.operation not in (op, AclOperation.ALL):
            return False
        if b.resource_pattern_type == ResourcePatternType.PREFIXED:
            return topic.startswith(b.name)
        return b.name in (topic, "*")
    hits = [b for b in bindings if matches(b)]
    return bool(hits) and not any(b.permission_type == AclPermissionType.DENY for b in hits)


def test_the_producer_writes_its_topics_and_the_merge_job_its_outputs_only():
    clean = ["cdc.clean."]
    producer, merge = producer_acls("p", "cdc", clean), merge_acls("m", "cdc", clean)
    W, R = AclOperation.WRITE, AclOperation.READ
    for topic in ("cdc.shop.orders", "cdc._offsets", "cdc._markers", "cdc._schemas", "cdc"):
        assert _can(producer, W, topic) and _can(producer, R, topic), topic
        assert _can(merge, R, topic) and not _can(merge, W, topic), topic
    for topic in ("cdc.clean.shop.orders", "cdc._dlq"):
        assert _can(merge, W, topic) and not _can(producer, W, topic), topic
    assert not _can(producer, R, "cdc.clean.shop.orders") and _can(merge, R, "cdc.clean.shop.orders")
    assert not _can(producer, W, "other.shop.orders") and not _can(merge, R, "other.shop.orders")
