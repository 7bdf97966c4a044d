"""Apache Kafka for the embedded stack: an external Kafka when configured, else a KRaft
cluster of this machine's own.

The jars are Apache Kafka's (``org.apache.kafka:kafka_2.13``, the version in ``java/pom.xml``,
the same as docker/compose.yaml's image) with a log4j2 binding, resolved from Maven Central
by ``make jars`` into ``.jars/kafka``.  Each node is one JVM that is both broker and
controller (``process.roles=broker,controller``), with a static quorum of every node
(``controller.quorum.voters``); its log directory and its configuration live in
``<state>/kafka/node-<id>/``, so a cluster stopped and started again keeps its topics.

``--brokers 3``: three such nodes; topics are created with replication factor 3 and
``min.insync.replicas`` 2, so one node can die (or stop for an upgrade) without a write being
refused or a committed record lost.

Secure (``cdc stack up --secure``): the clients' listener speaks SASL_SSL with SCRAM-SHA-512
(SCRAM-SHA-256 and PLAIN offered too), the brokers and controllers talk to each other over
SASL_SSL with PLAIN as the super user ``broker``, and Kafka's ``StandardAuthorizer`` applies
the ACLs the stack gives each user (:mod:`cdc.stack.secure`).
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdc.errors import StackError
from cdc.stack.process import free_port, pid_alive, port_listener, port_open, spawn, stop_pid, stop_pids, wait_until
from common.jars import java_binary, module_classpath, module_jars

#: The module of java/pom.xml that holds Kafka's jars.
JARS_MODULE = "kafka"
#: The heap of each node: Kafka's own default (kafka-server-start.sh) is 1 GB.
DEFAULT_HEAP = "1g"
#: Kafka's JVM settings from kafka-run-class.sh.
JVM_OPTS = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
            "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true")
#: The SASL mechanisms the secure listener offers; the stack's clients log in with the first.
SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
#: The user the nodes log in to each other as (PLAIN, a super user).
BROKER_USER = "broker"

_LOG4J2 = """\
Configuration:
  name: cdc-kafka
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
      ThresholdFilter:
        level: WARN
    RollingFile:
      name: SERVER
      fileName: "{dir}/server.log"
      filePattern: "{dir}/server.log.%i"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
      Policies:
        SizeBasedTriggeringPolicy:
          size: 20MB
      DefaultRolloverStrategy:
        max: 2
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
        - ref: SERVER
    Logger:
      - name: org.apache.kafka.common.config.AbstractConfig
        level: WARN
      - name: state.change.logger
        level: WARN
      - name: kafka.request.logger
        level: WARN
"""


@dataclass(frozen=True)
class BrokerSecurity:
    """What a secure cluster's listeners need: a PKCS#12 key store with the nodes' certificate
    and key and the file holding its password, the CA that signed it (PEM, the trust store of
    the nodes' own connections), the password file of the nodes' own user (:data:`BROKER_USER`),
    and the PLAIN users' password files (``name -> path``; SCRAM users are kept by Kafka itself,
    :meth:`EmbeddedKafka.add_scram_users`)."""

    keystore: str
    keystore_password_file: str
    ca: str
    broker_password_file: str
    plain_users: dict[str, str] = field(default_factory=dict)


def kafka_version() -> str:
    """The version of the Kafka the embedded stack runs (its jar in ``.jars/kafka``)."""
    for jar in module_jars(JARS_MODULE):
        if jar.name.startswith("kafka_2.13-"):
            return jar.name[len("kafka_2.13-"):-len(".jar")]
    raise StackError("no kafka_2.13 jar in .jars/kafka: run 'make jars'")


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, base64url without padding, never starting with
    ``-`` (which a command line would take for an option), as Kafka's own ``Uuid.randomUuid``."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _read(path: str) -> str:
    return Path(path).read_text().strip()


def secret_reference(path: str) -> str:
    """A secret file as a reference Kafka resolves when it reads its configuration (its
    ``DirectoryConfigProvider``, registered as ``dir``): server.properties holds no secret."""
    p = Path(path)
    return f"${{dir:{p.parent}:{p.name}}}"


def _jaas_plain(user: str, password_file: str, users: dict[str, str]) -> str:
    """A PLAIN login module line: the node's own credentials and the users it accepts
    (``name -> password file``), every password a :func:`secret_reference`."""
    accepted = " ".join(f'user_{name}="{secret_reference(pw)}"' for name, pw in users.items())
    return (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{user}" '
            f'password="{secret_reference(password_file)}" {accepted};')


def node_properties(node_id: int, ports: dict[int, tuple[int, int]], data_dir: Path, *, replication: int,
                    security: BrokerSecurity | None = None) -> dict[str, str]:
    """``server.properties`` of node ``node_id`` of a cluster whose nodes listen on ``ports``
    (``node id -> (client port, controller port)``), every node a voter of the quorum."""
    port, controller_port = ports[node_id]
    voters = ",".join(f"{n}@127.0.0.1:{c}" for n, (_, c) in sorted(ports.items()))
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "default.replication.factor": str(replication),
        "min.insync.replicas": str(min(2, replication)),
        "offsets.topic.replication.factor": str(replication),
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": str(min(2, replication)),
        "transaction.state.log.num.partitions": "10",
        "share.coordinator.state.topic.replication.factor": str(replication),
        "share.coordinator.state.topic.min.isr": str(min(2, replication)),
        "group.initial.rebalance.delay.ms": "0",
        # Topics are made by the pipeline with their partitions and settings (ensure_topics).
        "auto.create.topics.enable": "false",
        # How often retention looks for segments to delete (Kafka's default: 5 minutes); a
        # topic's retention.ms / retention.bytes say what goes.
        "log.retention.check.interval.ms": "10000",
        "unclean.leader.election.enable": "false",
    }
    if security is None:
        props.update({
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
        })
        return props
    broker_password = security.broker_password_file
    plain_users = {BROKER_USER: broker_password, **security.plain_users}
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    props.update({
        "config.providers": "dir",
        "config.providers.dir.class": "org.apache.kafka.common.config.provider.DirectoryConfigProvider",
        # Clients on CLIENT (SASL_SSL, every mechanism); the nodes on BROKER and CONTROLLER
        # (SASL_SSL, PLAIN as the super user BROKER_USER).  Only loopback addresses.
        "listeners": f"CLIENT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"CLIENT://127.0.0.1:{port}",
        "listener.security.protocol.map": "CLIENT:SASL_SSL,CONTROLLER:SASL_SSL",
        "inter.broker.listener.name": "CLIENT",
        "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.client.sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.client.plain.sasl.jaas.config": _jaas_plain(BROKER_USER, broker_password, plain_users),
        "listener.name.controller.plain.sasl.jaas.config": _jaas_plain(BROKER_USER, broker_password,
                                                                       {BROKER_USER: broker_password}),
        "listener.name.client.scram-sha-512.sasl.jaas.config": scram,
        "listener.name.client.scram-sha-256.sasl.jaas.config": scram,
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": security.keystore,
        "ssl.keystore.password": secret_reference(security.keystore_password_file),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": security.ca,
        "ssl.endpoint.identification.algorithm": "https",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{BROKER_USER}",
        "allow.everyone.if.no.acl.found": "false",
    })
    return props


def _properties_text(props: dict[str, str]) -> str:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace("\n", "\\n")
    return "".join(f"{k}={escape(v)}\n" for k, v in props.items())


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


class EmbeddedKafka:
    """A KRaft cluster of ``brokers`` nodes in ``<state_dir>/kafka``."""

    def __init__(self, state_dir: Path, brokers: int = 1, *, heap: str = DEFAULT_HEAP) -> None:
        if brokers not in (1, 3):
            raise StackError(f"the embedded Kafka runs 1 or 3 brokers, not {brokers}")
        self.root = state_dir / "kafka"
        self.brokers = brokers
        self.heap = heap

    def node_dir(self, node_id: int) -> Path:
        return self.root / f"node-{node_id}"

    @staticmethod
    def running(previous: dict) -> bool:
        """Whether every node recorded in ``previous`` is up."""
        nodes = (previous or {}).get("nodes") or []
        return bool(nodes) and all(pid_alive(n.get("pid")) and port_open("127.0.0.1", n["port"]) for n in nodes)

    @staticmethod
    def data_lost(previous: dict) -> bool:
        """Whether the cluster recorded in ``previous`` lost its data: no node's log directory
        holds the recorded cluster (deleted, or formatted for another)."""
        nodes = (previous or {}).get("nodes") or []
        if not nodes or not previous.get("cluster_id"):
            return False
        return not any(_formatted_for(Path(n["data_dir"]), previous["cluster_id"]) for n in nodes)

    def start(self, previous: dict | None = None, *, security: BrokerSecurity | None = None) -> dict:
        """Start the cluster (nodes already up are left alone, dead ones started again on their
        ports and data); its record for stack.json."""
        previous = previous if previous and previous.get("nodes") else None
        if previous and len(previous["nodes"]) != self.brokers:
            if self.running(previous):
                raise StackError(f"this stack's Kafka runs {len(previous['nodes'])} broker(s), not {self.brokers}: "
                                 "run 'cdc stack down' first (the topics stay in the state directory only for the "
                                 "same number of brokers)")
            previous = None
        if previous and bool(previous.get("secure")) != bool(security):
            if self.running(previous):
                raise StackError("this stack's Kafka is up with other listeners: run 'cdc stack down' first")
        cluster_id = (previous or {}).get("cluster_id") or new_cluster_id()
        ports = self._ports(previous)
        classpath = module_classpath(JARS_MODULE)
        # Every node launched before any is waited for: a node answers only once a quorum of
        # the controllers runs (and gives up when none comes within a minute).
        nodes = [self._start_node(node_id, ports, cluster_id, classpath,
                                  next((n for n in (previous or {}).get("nodes", []) if n["id"] == node_id), None),
                                  security, wait=False)
                 for node_id in sorted(ports)]
        for node in nodes:
            self._wait_node(node)
        info = {"embedded": True, "bootstrap_servers": ",".join(f"127.0.0.1:{ports[n][0]}" for n in sorted(ports)),
                "cluster_id": cluster_id, "brokers": self.brokers, "heap": self.heap, "nodes": nodes,
                "secure": bool(security)}
        wait_for_brokers(info["bootstrap_servers"], self.brokers, admin_settings(security))
        return info

    def _ports(self, previous: dict | None) -> dict[int, tuple[int, int]]:
        ports: dict[int, tuple[int, int]] = {}
        for node_id in range(1, self.brokers + 1):
            old = next((n for n in (previous or {}).get("nodes", []) if n["id"] == node_id), None)
            if old:
                ports[node_id] = (old["port"], old["controller_port"])
            else:
                ports[node_id] = (free_port(), free_port())
        return ports

    def _start_node(self, node_id: int, ports: dict[int, tuple[int, int]], cluster_id: str, classpath: str,
                    old: dict | None, security: BrokerSecurity | None, *, wait: bool = True) -> dict:
        """Launch node ``node_id`` (left alone when ``old`` records it running); with ``wait``,
        until its client port answers (:meth:`_wait_node`).  Its record."""
        d = self.node_dir(node_id)
        data_dir = d / "data"
        port, controller_port = ports[node_id]
        record = {"id": node_id, "port": port, "controller_port": controller_port, "data_dir": str(data_dir),
                  "config": str(d / "server.properties"), "log": str(d / "kafka.log")}
        if old and pid_alive(old.get("pid")) and port_open("127.0.0.1", port):
            return {**record, "pid": old["pid"]}
        for p in (port, controller_port):
            if port_open("127.0.0.1", p):
                raise StackError(f"Kafka node {node_id}'s port {p} is taken by another process "
                                 f"({port_listener(p) or 'not known'}): stop it, or move "
                                 f"{self.root} away to start a new cluster on new ports")
        props = node_properties(node_id, ports, data_dir, replication=min(3, self.brokers), security=security)
        _write_private(d / "server.properties", _properties_text(props))
        (d / "log4j2.yaml").write_text(_LOG4J2.replace("{dir}", str(d)))
        java = java_binary()
        if not _formatted_for(data_dir, cluster_id):
            if data_dir.exists():
                shutil.rmtree(data_dir)  # another cluster's (or half-formatted): this cluster's is gone anyway
            self._format(java, classpath, d, cluster_id, node_id)
        argv = [java, f"-Xms{min_heap(self.heap)}", f"-Xmx{self.heap}", *JVM_OPTS,
                f"-Dlog4j2.configurationFile={d / 'log4j2.yaml'}", f"-Dkafka.logs.dir={d}", "-cp", classpath,
                "kafka.Kafka", str(d / "server.properties")]
        node = {**record, "pid": spawn(argv, d / "kafka.log")}
        if wait:
            self._wait_node(node)
        return node

    @staticmethod
    def _wait_node(node: dict) -> None:
        wait_until(lambda: port_open("127.0.0.1", node["port"]), 90, f"Kafka node {node['id']} on port {node['port']}",
                   pid=node["pid"], log_path=Path(node["log"]))

    def _format(self, java: str, classpath: str, d: Path, cluster_id: str, node_id: int) -> None:
        import subprocess
        argv = [java, "-Xmx256m", f"-Dlog4j2.configurationFile={d / 'log4j2.yaml'}", "-cp", classpath,
                "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(d / "server.properties"),
                "--ignore-formatted"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise StackError(f"formatting Kafka node {node_id}'s log directory failed:\n"
                             f"{done.stdout[-2000:]}{done.stderr[-2000:]}")

    def restart_node(self, info: dict, node_id: int, *, security: BrokerSecurity | None = None) -> dict:
        """Start node ``node_id`` of the running cluster ``info`` again (after :func:`stop_node`)
        on its ports and data; ``info`` is updated with its new pid and returned."""
        ports = {n["id"]: (n["port"], n["controller_port"]) for n in info["nodes"]}
        old = next(n for n in info["nodes"] if n["id"] == node_id)
        node = self._start_node(node_id, ports, info["cluster_id"], module_classpath(JARS_MODULE), old, security)
        info["nodes"] = [node if n["id"] == node_id else n for n in info["nodes"]]
        return info

    def stop(self, info: dict) -> bool:
        """Stop every node at once (SIGTERM: each shuts down cleanly, then SIGKILL after a
        minute).  One by one, the last ones would wait for a quorum that is gone."""
        return bool(stop_pids([(n.get("pid"), n["config"]) for n in info.get("nodes") or []], timeout=60.0))


def admin_settings(security: BrokerSecurity | None) -> dict[str, str]:
    """librdkafka settings of a client logging in as the nodes' own super user (none for a
    plain cluster): the stack's own calls, such as creating the users and their ACLs."""
    if security is None:
        return {}
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": BROKER_USER,
            "sasl.password": _read(security.broker_password_file), "ssl.ca.location": security.ca}


def min_heap(heap: str) -> str:
    """The initial heap: 256 MB, or the whole heap when that is smaller."""
    return heap if heap.lower() in ("128m", "256m") else "256m"


def stop_node(node: dict, *, sig: int = signal.SIGTERM) -> bool:
    """Stop one node (SIGTERM: Kafka's controlled shutdown, which moves its partitions'
    leadership away first; SIGKILL: a crash); True if it was running."""
    return stop_pid(node.get("pid"), node["config"], timeout=60.0, sig=sig)


def set_consumer_quota(bootstrap: str, bytes_per_s: int | None, *, client: str | None = None) -> None:
    """Kafka's fetch quota (``consumer_byte_rate``) for the consumers of client id ``client``
    (None: every client without a quota of its own), set with Kafka's own ``ConfigCommand``
    from the stack's jars; ``bytes_per_s`` None removes it.  The broker then delays its fetch
    answers so that those clients read no faster (a slow network, a busy broker)."""
    import subprocess
    entity = ["--entity-type", "clients", *(["--entity-name", client] if client else ["--entity-default"])]
    change = ["--add-config", f"consumer_byte_rate={bytes_per_s}"] if bytes_per_s is not None else \
        ["--delete-config", "consumer_byte_rate"]
    done = subprocess.run([java_binary(), "-Xmx256m", "-cp", module_classpath(JARS_MODULE), "kafka.admin.ConfigCommand",
                           "--bootstrap-server", bootstrap, "--alter", *entity, *change],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise StackError(f"Kafka's ConfigCommand could not set the consumer quota: {done.stderr[-1500:]}")


def partition_leaders(bootstrap: str, topics: list[str], client: dict[str, Any] | None = None
                      ) -> dict[tuple[str, int], int]:
    """The node leading each partition of ``topics`` (those that exist), as the cluster's
    metadata says now."""
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": bootstrap, **(client or {})}).list_topics(timeout=15)
    return {(t, p): pmd.leader for t in topics if t in md.topics and md.topics[t].error is None
            for p, pmd in md.topics[t].partitions.items()}


def _formatted_for(data_dir: Path, cluster_id: str) -> bool:
    meta = data_dir / "meta.properties"
    try:
        return f"cluster.id={cluster_id}" in meta.read_text().splitlines()
    except OSError:
        return False


def wait_for_brokers(bootstrap: str, count: int, client: dict[str, Any] | None = None, timeout: float = 90.0) -> None:
    """Until ``count`` brokers are registered and answer metadata requests."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client or {})})
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(timeout=5)
            if len(md.brokers) >= count:
                return
            last = f"{len(md.brokers)} of {count} brokers registered"
        except Exception as exc:  # KafkaException: not answering yet
            last = str(exc)
        time.sleep(0.2)
    raise StackError(f"Kafka at {bootstrap} did not become ready within {timeout:.0f}s: {last}")


def node_pids(info: dict) -> list[int]:
    """The pids of the Kafka nodes a stack's ``kafka`` record names (none for an external Kafka)."""
    return [n["pid"] for n in (info or {}).get("nodes") or [] if n.get("pid")]


def kafka_pids(info: dict, name: str = "broker") -> dict[str, int]:
    """``{name: pid}`` of the Kafka nodes (``broker``, or ``broker-2``... with several), for
    the benchmarks' memory and CPU columns."""
    pids = node_pids(info)
    return {name if len(pids) == 1 else f"{name}-{i}": pid for i, pid in enumerate(pids, start=1)}


def external_broker(bootstrap: str) -> dict:
    return {"embedded": False, "bootstrap_servers": bootstrap}


