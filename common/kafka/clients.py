"""librdkafka client configurations and topic creation from the ``kafka`` section."""

from __future__ import annotations

import logging
import time
from typing import Any, Iterable, Protocol

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from common.errors import KafkaAuthError
from common.kafka.security import SECURITY_KEYS

_log = logging.getLogger(__name__)


class KafkaSection(Protocol):
    """What the clients read of a ``kafka`` section (``common.config.KafkaConfig`` is one: named
    here by what it has, so this layer imports nothing of the configuration's)."""

    bootstrap_servers: str
    client: dict[str, Any]
    compression: str
    partitions: int
    replication_factor: int
    security: Any  # (the kafka.security section: protocol, sasl_mechanism, sasl_username, ca...)

    @property
    def security_setting(self) -> str: ...

    def client_settings(self) -> dict[str, str]: ...


def base_config(cfg: KafkaSection) -> dict:
    return {"bootstrap.servers": cfg.bootstrap_servers, **cfg.client_settings()}


def check_connection(cfg: KafkaSection, *, timeout: float = 15.0) -> None:
    """Fail at once, naming the ``kafka.security`` setting to look at, when the brokers refuse
    this client's TLS handshake or SASL login (librdkafka itself would retry for ever); any
    other failure to reach them is left to the caller's own retries.  Nothing to check (and no
    wait) without security settings."""
    if cfg.security.protocol == "PLAINTEXT" and not SECURITY_KEYS & set(cfg.client):
        return
    errors: list[KafkaError] = []
    admin = AdminClient({**base_config(cfg), "error_cb": errors.append})
    try:
        admin.list_topics(timeout=timeout)
        return
    except KafkaException:
        admin.poll(0.5)  # (serves the error callbacks)
    problem = security_problem(errors, cfg)
    if problem is not None:
        raise KafkaAuthError(problem)


def security_problem(errors: list[KafkaError], cfg: KafkaSection) -> str | None:
    """What the client errors ``errors`` say about the client's security settings (``kafka.security``,
    or the part's own login: :attr:`KafkaConfig.security_setting`), or None."""
    sec, where, name = cfg.security, cfg.bootstrap_servers, cfg.security_setting
    for err in errors:
        text = err.str()
        if err.code() == KafkaError._AUTHENTICATION:
            return (f"Kafka at {where} refused the SASL login of {name}.sasl_username {sec.sasl_username!r} "
                    f"with {sec.sasl_mechanism}: check {name}.sasl_password (or sasl_password_file) and "
                    f"sasl_mechanism ({text})")
        if err.code() == KafkaError._SSL:
            ca = f"{name}.ca ({sec.ca})" if sec.ca else f"{name}.ca (unset: the system's CAs)"
            return (f"TLS with Kafka at {where} failed: check {ca}, the CA that signed the brokers' certificates, and "
                    f"{name}.verify_hostname ({text})")
        if "security.protocol" in text:
            return (f"Kafka at {where} closed the connection: {name}.protocol {sec.protocol!r} is likely not "
                    f"what its listener speaks ({text})")
    return None


#: The errors of a request the user's ACLs do not allow.
AUTHORIZATION_ERRORS = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                                  KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                  KafkaError.CLUSTER_AUTHORIZATION_FAILED})


def authorization_problem(err: KafkaError | None, cfg: KafkaSection, what: str) -> str | None:
    """What to tell a user when Kafka refused ``what`` (``"write to topic X"``) to this client's
    user for its ACLs (None for any other error): retrying cannot help."""
    if err is None or err.code() not in AUTHORIZATION_ERRORS:
        return None
    user = cfg.security.sasl_username or "(the client's principal)"
    return (f"Kafka refused {what} to user {user!r} ({err.name()}): its ACLs do not allow it; check the user's ACLs "
            f"and the login this part uses ({cfg.security_setting})")


def producer_config(cfg: KafkaSection, *, transactional_id: str | None = None, **extra) -> dict:
    conf = {**base_config(cfg), "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "compression.type": cfg.compression, "queue.buffering.max.messages": 200000}
    if transactional_id:
        conf["transactional.id"] = transactional_id
    conf.update(extra)
    return conf


#: The errors of a topic's creation that a new attempt can get past: the brokers answer, but
#: the controller the request waits for is away (a node down, an election under way).
RETRIABLE_CREATE_ERRORS = frozenset({KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError.NOT_CONTROLLER,
                                     KafkaError.REQUEST_TIMED_OUT, KafkaError._ALL_BROKERS_DOWN})


#: Errors of a look-up or a read that mean the cluster is away or moving for now (no answer,
#: a node down, a partition's leader being elected, a topic's metadata not on every node yet).
KAFKA_AWAY_ERRORS = frozenset({KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                               KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION,
                               KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                               KafkaError._UNKNOWN_PARTITION, KafkaError.COORDINATOR_NOT_AVAILABLE,
                               KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS})


def kafka_away(exc: BaseException) -> bool:
    """Whether ``exc`` (a ``KafkaException``) says the cluster is away or moving for now
    (:data:`KAFKA_AWAY_ERRORS`, or an error librdkafka marks retriable) rather than refusing:
    a new attempt can get past it."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if not isinstance(err, KafkaError) or err.fatal():
        return False
    return err.code() in KAFKA_AWAY_ERRORS or err.retriable()


def ensure_topics(cfg: KafkaSection, names: Iterable[str], *, partitions: int | None = None,
                  compacted: bool = False, timeout: float = 30.0, retry_s: float = 180.0) -> None:
    """Create the topics that do not exist yet (existing ones are left as they are).

    A creation that fails for a reason a new attempt can get past (:data:`RETRIABLE_CREATE_ERRORS`:
    the cluster answers, its controller does not) is tried again with a new admin client (fresh
    metadata: another controller) for up to ``retry_s`` seconds, each failure logged; no broker
    answering at all (the topics' listing fails) raises at once."""
    deadline = time.monotonic() + retry_s
    while True:
        failed = _create_missing(cfg, names, partitions, compacted, timeout)
        if failed is None:
            return
        if time.monotonic() > deadline:
            raise KafkaException(failed)
        _log.warning("creating Kafka topics failed (%s); trying again with a new admin client", failed.str())
        time.sleep(1.0)


def _create_missing(cfg: KafkaSection, names: Iterable[str], partitions: int | None, compacted: bool,
                    timeout: float) -> KafkaError | None:
    """One attempt of :func:`ensure_topics`: None when every topic exists now, else the error
    that a new attempt can get past (any other is raised)."""
    admin = AdminClient(base_config(cfg))
    existing = set(admin.list_topics(timeout=timeout).topics)
    wanted = [n for n in dict.fromkeys(names) if n not in existing]
    if not wanted:
        return None
    conf = {"cleanup.policy": "compact"} if compacted else {}
    futures = admin.create_topics(
        [NewTopic(n, partitions or cfg.partitions, cfg.replication_factor, config=conf) for n in wanted],
        operation_timeout=timeout)
    retriable = None
    for name, fut in futures.items():
        try:
            fut.result()
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            refused = authorization_problem(err, cfg, f"creating topic {name}")
            if refused:
                raise KafkaAuthError(refused) from None
            if err is not None and err.code() in RETRIABLE_CREATE_ERRORS:
                retriable = err
            elif "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    return retriable


def delete_topics(cfg: KafkaSection, names: Iterable[str], *, timeout: float = 30.0) -> None:
    """Delete the topics that exist (the others are left alone)."""
    admin = AdminClient(base_config(cfg))
    existing = set(admin.list_topics(timeout=timeout).topics)
    doomed = [n for n in dict.fromkeys(names) if n in existing]
    if not doomed:
        return
    for name, fut in admin.delete_topics(doomed, operation_timeout=timeout).items():
        try:
            fut.result()
        except KafkaException as exc:
            if "UNKNOWN_TOPIC" not in str(exc):
                raise


#: The id a broker without topic ids (Kafka before 2.8) reports: no id.
_NO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def topic_ids(bootstrap_servers: str, topics: Iterable[str], *, client_config: dict | None = None,
              timeout: float = 15.0, admin: AdminClient | None = None) -> dict[str, str]:
    """Kafka's topic id of each topic that exists (a new id when a topic is deleted and
    created again).  Topics the broker does not know, and brokers without topic ids, are
    left out: callers compare ids only where both sides know one.  ``admin``: an admin client
    of the caller's to ask instead of a new one (``client_config`` is then its)."""
    from confluent_kafka import TopicCollection

    names = sorted(set(topics))
    if not names:
        return {}
    if admin is None:  # (not `admin or ...`: an admin client with nothing queued has len() 0, so it is falsy)
        admin = AdminClient({"bootstrap.servers": bootstrap_servers, **(client_config or {})})
    out: dict[str, str] = {}
    for name, fut in admin.describe_topics(TopicCollection(names), request_timeout=timeout).items():
        try:
            description = fut.result(timeout)
        except KafkaException:
            continue  # unknown topic (deleted meanwhile): no id
        tid = str(getattr(description, "topic_id", "") or "")
        if tid and tid != _NO_TOPIC_ID:
            out[name] = tid
    return out
