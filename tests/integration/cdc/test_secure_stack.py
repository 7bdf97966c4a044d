"""``cdc demo --secure`` end to end on a secure stack (TLS and passwords on every connection),
then: no password it used in anything it wrote (files, logs, its output, every Kafka topic),
each server refusing what it must (plain text, a wrong CA, a wrong SASL password), each SASL
mechanism Kafka offers logging in for real, and Kafka's ACLs giving the producer and the
merge job their own topics only.

The demo runs once for the module (``--keep-running``), as ``make demo`` would run it: a
process of its own, its output kept as its log; the stack is stopped at the end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from cdc.stack.certs import CertificateAuthority
from cdc.stack.manager import read_stack, stack_down
from cdc.stack.mysql_server import server_connect
from common.config import load_config
from common.errors import KafkaAuthError, TlsError
from common.kafka.clients import check_connection
from common.kafka.topic_reader import read_topic
from common.sql.sessions import connect
from common.sql.tls import is_secure
from producer.app import ProducerApp
from spark_jobs.errors import SinkUnavailable
from spark_jobs.sinks.mysql import MySQLSink
from spark_jobs.sinks.postgres import PostgresSink

ROOT = Path(__file__).resolve().parents[3]
#: The stack's credential stores, written by 'cdc stack up' for its owner only: not scanned.
CREDENTIAL_STORES = ("secrets", "stack.json")


@pytest.fixture(scope="module")
def secure_demo(tmp_path_factory):
    state = tmp_path_factory.mktemp("secure") / "demo"
    log = state.parent / "demo-output.log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    with open(log, "wb") as out:
        proc = subprocess.run([sys.executable, "-m", "cdc.cli", "demo", "--secure", "--keep-running",
                               "--state-dir", str(state)], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                              timeout=1800)
    try:
        yield {"state": state.resolve(), "log": log, "returncode": proc.returncode,
               "output": log.read_text(errors="replace")}
    finally:
        stack_down(state.resolve())


def _demo_prefix(topics) -> str:
    """The demo run's topic prefix (``demo<time>``)."""
    runs = {t.split(".", 1)[0] for t in topics if re.fullmatch(r"demo\d+\.shop\.customers", t)}
    assert len(runs) == 1, sorted(topics)
    return runs.pop()


def _passwords(state: Path) -> dict[str, str]:
    return {p.name: p.read_text().strip() for p in (state / "secrets").iterdir() if p.name.endswith("_password")}


def _written_files(state: Path, data: dict) -> list[Path]:
    roots = [state, Path(data["postgres"]["datadir"]).parent]  # (PostgreSQL may live beside the state dir)
    files = []
    for root in dict.fromkeys(roots):
        for path in root.rglob("*"):
            rel = path.relative_to(root).parts
            if path.is_file() and not (root == state and rel[0] in CREDENTIAL_STORES):
                files.append(path)
    return files


def test_the_secure_demo_is_consistent(secure_demo):
    out = secure_demo["output"]
    assert secure_demo["returncode"] == 0, out[-3000:]
    assert "consistent: every sink equals its source table" in out and "INCONSISTENT" not in out
    assert re.search(r"merged\s+by\s+Spark", out)  # (make demo's lakes: the spark engine, its JDBC catalog over TLS)
    data = read_stack(secure_demo["state"])
    assert data["secure"] and data["mysql"]["tls"] and data["postgres"]["secure"] and data["kafka"]["secure"]
    assert {u["sasl_username"] for u in data["kafka"]["users"].values()} == {"cdc", "cdc-producer", "cdc-merge"}


def test_no_password_in_any_file_log_or_output_the_pipeline_wrote(secure_demo):
    state = secure_demo["state"]
    passwords = _passwords(state)
    assert set(passwords) == {"kafka_password", "kafka_producer_password", "kafka_merge_password",
                              "kafka_broker_password", "kafka_keystore_password", "mysql_admin_password",
                              "mysql_cdc_password", "postgres_password"}
    cfg_text = (state / "cdc.yaml").read_text()
    assert "password_file:" in cfg_text and "passfile=" in cfg_text  # the configuration names files only
    files = _written_files(state, read_stack(state)) + [secure_demo["log"]]
    assert len(files) > 50  # logs, status files, checkpoints, lake files, the servers' data
    leaks = []
    for path in files:
        try:
            blob = path.read_bytes()
        except FileNotFoundError:  # a server's temporary file, gone meanwhile (the stack still runs)
            continue
        leaks += [f"{name} in {path}" for name, pw in passwords.items() if pw.encode() in blob]
    assert leaks == []


def test_no_password_in_any_kafka_topic(secure_demo):
    state = secure_demo["state"]
    cfg = load_config(state / "cdc.yaml")
    from confluent_kafka.admin import AdminClient
    conf = {"bootstrap.servers": cfg.kafka.bootstrap_servers, **cfg.kafka.client_settings()}
    topics = [t for t in AdminClient(conf).list_topics(timeout=30).topics if not t.startswith("__")]
    assert any(t.endswith(".shop.customers") for t in topics)
    passwords = [pw.encode() for pw in _passwords(state).values()]
    records = 0
    for topic in topics:
        for m in read_topic(cfg.kafka.bootstrap_servers, topic, client_config=cfg.kafka.client_settings()):
            records += 1
            blob = (m.key() or b"") + (m.value() or b"")
            assert not any(pw in blob for pw in passwords), f"a password in a record of {topic}"
    assert records > 200_000


def test_mariadb_refuses_plain_text_and_postgres_accepts_tls_with_a_password_only(secure_demo):
    state = secure_demo["state"]
    cfg = load_config(state / "cdc.yaml")
    conn = connect(cfg.source)
    assert is_secure(conn)
    conn.close()
    cfg.source.ssl.mode = "disabled"
    with pytest.raises(TlsError, match="source.ssl.mode is 'disabled'"):
        connect(cfg.source)
    # The MySQL sink: TLS as sinks.mysql.ssl says, refused without it.
    sink = MySQLSink.from_config(cfg.sinks.mysql)
    assert is_secure(sink.connection())
    sink.close()
    cfg.sinks.mysql.ssl.mode = "disabled"
    with pytest.raises(TlsError, match="sinks.mysql.ssl.mode is 'disabled'"):
        MySQLSink.from_config(cfg.sinks.mysql).connection()
    # The PostgreSQL sink honours its DSN's sslmode: verify-full works, disable is refused (hostssl only).
    dsn = cfg.sinks.postgres.dsn.get_secret_value()
    assert "sslmode=verify-full" in dsn
    pg = PostgresSink(dsn)
    assert pg.connection().pgconn.ssl_in_use
    pg.close()
    with pytest.raises(SinkUnavailable, match="no pg_hba.conf entry .* no encryption"):
        PostgresSink(dsn.replace("sslmode=verify-full", "sslmode=disable")).connection()
    with pytest.raises(psycopg.OperationalError, match="no password supplied|password authentication failed"):
        psycopg.connect(dsn.split("&passfile=")[0], connect_timeout=5)


def test_kafka_refuses_a_wrong_password_or_ca_naming_the_setting(secure_demo, tmp_path):
    state = secure_demo["state"]
    cfg = load_config(state / "cdc.yaml")
    from confluent_kafka.admin import AdminClient
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"):  # each logs in and lists what the user may see
        cfg.kafka.security.sasl_mechanism = mechanism
        check_connection(cfg.kafka)
        conf = {"bootstrap.servers": cfg.kafka.bootstrap_servers, **cfg.kafka.client_settings()}
        topics = AdminClient(conf).list_topics(timeout=30).topics
        run = _demo_prefix(topics)
        assert f"{run}.shop.customers" in topics and f"{run}.clean.shop.customers" in topics, (mechanism, sorted(topics))
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password")
    cfg.kafka.security.sasl_mechanism = "SCRAM-SHA-512"
    cfg.producer.kafka_security.sasl_password_file = str(wrong)  # another file: its password replaces the first's
    with pytest.raises(KafkaAuthError) as err:
        ProducerApp(cfg).run(idle_exit_s=1)  # the producer stops at once, naming its setting
    text = str(err.value)
    assert "refused the SASL login of producer.kafka_security.sasl_username 'cdc-producer'" in text, text
    assert "producer.kafka_security.sasl_password" in text and "not-the-password" not in text
    right = load_config(state / "cdc.yaml")
    right.kafka.security.ca = CertificateAuthority(tmp_path / "other-ca", name="another CA").ca
    with pytest.raises(KafkaAuthError, match=r"TLS with Kafka at .* failed: check kafka.security.ca \(.*other-ca"):
        check_connection(right.kafka)


def test_the_stack_servers_admin_connections_run_over_tls(secure_demo):
    data = read_stack(secure_demo["state"])
    with server_connect(data["mysql"]) as conn:
        assert is_secure(conn)


def test_kafka_acls_give_each_part_its_own_topics_with_a_clear_error_otherwise(secure_demo):
    """The producer logs in as cdc-producer, the merge job as cdc-merge (cdc.yaml's
    producer.kafka_security and spark.kafka_security): each may do its work, and nothing of the
    other's.  A part that logs in as the other stops at once, saying what Kafka refused."""
    from confluent_kafka.admin import AdminClient
    state = secure_demo["state"]
    cfg = load_config(state / "cdc.yaml")
    producer, merge = cfg.for_part("producer").kafka, cfg.for_part("merge").kafka
    assert (producer.security.sasl_username, merge.security.sasl_username) == ("cdc-producer", "cdc-merge")
    run = _demo_prefix(AdminClient({"bootstrap.servers": cfg.kafka.bootstrap_servers,
                                    **cfg.kafka.client_settings()}).list_topics(timeout=30).topics)
    clean = f"{run}.clean.shop.customers"
    # A denied read: the producer's user may not read the merge job's output...
    with pytest.raises(KafkaAuthError, match=rf"Kafka refused reading {re.escape(clean)}\[0\] to user "
                                             r"'cdc-producer' \(TOPIC_AUTHORIZATION_FAILED\)"):
        list(read_topic(producer.bootstrap_servers, clean, client_config=producer.client_settings()))
    # ... which the merge job's user reads, as it reads the table topics.
    assert any(True for _ in read_topic(merge.bootstrap_servers, clean, client_config=merge.client_settings()))
    # A denied write: the merge job's user may not write a table topic; the demo's producer,
    # started again with that login, stops at once, naming the topic and the setting.
    wrong = load_config(state / "cdc.yaml")
    wrong.kafka.topic_prefix = wrong.producer.name = run
    wrong.state_dir = str(state / run)
    wrong.source.include_databases = ["shop"]
    wrong.producer.kafka_security = wrong.spark.kafka_security
    wrong.kafka.transactions = False  # (else its transactional id is refused first, as clearly)
    with server_connect(read_stack(state)["mysql"], autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("UPDATE shop.customers SET name = CONCAT(name, '.') ORDER BY id LIMIT 1")
    with pytest.raises(KafkaAuthError) as refused:
        ProducerApp(wrong).run(idle_exit_s=5)
    text = str(refused.value)
    # (whichever of its writes the broker answers first: the table's change or its offset record)
    assert re.search(rf"Kafka refused a write to topic {re.escape(run)}\.(shop\.customers|_offsets) to user "
                     r"'cdc-merge' \(TOPIC_AUTHORIZATION_FAILED\)", text), text
    assert "producer.kafka_security" in text
