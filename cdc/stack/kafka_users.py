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


def grant_pipeline(admin_conf: dict, user: str) -> None:
    """What the whole pipeline (producer, merge job, operator tools) needs as one user: its
    topics, consumer groups and transactional ids, and idempotent writes; nothing on the
    cluster's configuration or its users."""
    ops = (AclOperation.ALL,)
    create_acls(admin_conf, [
        *allow(user, ResourceType.TOPIC, "*", ops),
        *allow(user, ResourceType.GROUP, "*", ops),
        *allow(user, ResourceType.TRANSACTIONAL_ID, "*", ops),
        *allow(user, ResourceType.BROKER, "kafka-cluster", (AclOperation.IDEMPOTENT_WRITE, AclOperation.DESCRIBE)),
    ])
