"""The secure stack's Kafka users and their ACLs, made through Kafka's Admin API as the
nodes' super user (:data:`cdc.stack.kafka_broker.BROKER_USER`).

SCRAM credentials are kept by Kafka itself (in its metadata log), for SCRAM-SHA-512 and
SCRAM-SHA-256 both; setting them again with the same password is harmless, so ``cdc stack
up`` sets them each time.
"""

from __future__ import annotations

from typing import Iterable

from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion)

from cdc.errors import StackError

#: SCRAM's iteration count (Kafka's minimum is 4096).
ITERATIONS = 8192


def upsert_scram_users(admin_conf: dict, users: dict[str, str], *, timeout: float = 30.0) -> None:
    """Set each user's password (``name -> password``) for SCRAM-SHA-512 and SCRAM-SHA-256."""
    admin = AdminClient(admin_conf)
    for mechanism in (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256):  # (one change a user a request)
        changes = [UserScramCredentialUpsertion(name, ScramCredentialInfo(mechanism, ITERATIONS), password.encode())
                   for name, password in users.items()]
        for name, fut in admin.alter_user_scram_credentials(changes, request_timeout=timeout).items():
            try:
                fut.result()
            except KafkaException as exc:
                raise StackError(f"Kafka did not take the {mechanism.name} credentials of user {name!r}: "
                                 f"{exc}") from exc


def allow(user: str, resource: ResourceType, name: str, operations: Iterable[AclOperation], *,
          prefixed: bool = False) -> list[AclBinding]:
    """ALLOW bindings of ``user`` on one resource (or every resource whose name starts with
    ``name``), from any host."""
    pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
    return [AclBinding(resource, name, pattern, f"User:{user}", "*", op, AclPermissionType.ALLOW)
            for op in operations]


def create_acls(admin_conf: dict, bindings: list[AclBinding], *, timeout: float = 30.0) -> None:
    admin = AdminClient(admin_conf)
    for binding, fut in admin.create_acls(bindings, request_timeout=timeout).items():
        try:
            fut.result()
        except KafkaException as exc:
            raise StackError(f"Kafka did not take the ACL {binding}: {exc}") from exc


def deny(user: str, resource: ResourceType, name: str, operations: Iterable[AclOperation], *,
         prefixed: bool = False) -> list[AclBinding]:
    """DENY bindings (they win over any ALLOW) of ``user`` on one resource or a name prefix."""
    pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
    return [AclBinding(resource, name, pattern, f"User:{user}", "*", op, AclPermissionType.DENY)
            for op in operations]


_WRITE = (AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)
_READ = (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)
_GROUPS = (AclOperation.READ, AclOperation.DESCRIBE)
_CLUSTER = (AclOperation.IDEMPOTENT_WRITE,)


def operator_acls(user: str, prefix: str) -> list[AclBinding]:
    """The operator tools' user (``cdc status``, ``verify``, ``snapshot``, ``route``, the demo):
    everything on the pipeline's topics (names starting with ``prefix``), nothing on the
    cluster's configuration or its users."""
    return [*allow(user, ResourceType.TOPIC, prefix, (AclOperation.ALL,), prefixed=True),
            *allow(user, ResourceType.GROUP, "*", _GROUPS),
            *allow(user, ResourceType.TRANSACTIONAL_ID, "*", (AclOperation.ALL,)),
            *allow(user, ResourceType.BROKER, "kafka-cluster", _CLUSTER)]


def producer_acls(user: str, prefix: str, clean_prefixes: Iterable[str]) -> list[AclBinding]:
    """The binlog producer's user: write (and read back) its topics, every topic whose name
    starts with ``prefix``, except the merge job's outputs (``clean_prefixes``, its dead
    letters and the operator's route decisions), which it may not touch; its transactions."""
    outputs = [*(deny(user, ResourceType.TOPIC, p, (AclOperation.WRITE, AclOperation.CREATE, AclOperation.READ),
                      prefixed=True) for p in clean_prefixes)]
    return [*allow(user, ResourceType.TOPIC, prefix, (*_WRITE, AclOperation.READ), prefixed=True),
            *[b for bindings in outputs for b in bindings],
            *deny(user, ResourceType.TOPIC, f"{prefix}._dlq", (AclOperation.WRITE, AclOperation.CREATE)),
            *deny(user, ResourceType.TOPIC, f"{prefix}._routes", (AclOperation.WRITE, AclOperation.CREATE)),
            *allow(user, ResourceType.GROUP, "*", _GROUPS),
            *allow(user, ResourceType.TRANSACTIONAL_ID, "cdc-producer-", (AclOperation.WRITE, AclOperation.DESCRIBE),
                   prefixed=True),
            *allow(user, ResourceType.BROKER, "kafka-cluster", _CLUSTER)]


def merge_acls(user: str, prefix: str, clean_prefixes: Iterable[str]) -> list[AclBinding]:
    """The merge job's user: read its inputs (every topic whose name starts with ``prefix``),
    write its outputs (the clean changelogs under ``clean_prefixes``, its dead letters) and
    make the markers topic when the producer has not yet; no write to any input."""
    clean = [b for p in clean_prefixes
             for b in allow(user, ResourceType.TOPIC, p, (*_WRITE, AclOperation.ALTER), prefixed=True)]
    return [*allow(user, ResourceType.TOPIC, prefix, _READ, prefixed=True), *clean,
            *allow(user, ResourceType.TOPIC, f"{prefix}._dlq", _WRITE),
            *allow(user, ResourceType.TOPIC, f"{prefix}._markers", (AclOperation.CREATE,)),
            *allow(user, ResourceType.GROUP, "*", _GROUPS),
            *allow(user, ResourceType.BROKER, "kafka-cluster", _CLUSTER)]
