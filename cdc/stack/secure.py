"""A secure embedded stack (``cdc stack up --secure``): TLS and passwords on every connection.

* MariaDB accepts TLS connections only (``require_secure_transport``); the pipeline connects
  with ``ssl.mode: verify_identity`` and the stack's CA;
* PostgreSQL accepts TLS connections with a password only (``hostssl ... scram-sha-256``);
  the DSN says ``sslmode=verify-full`` and names a libpq password file (``passfile``);
* Kafka's own listener speaks ``SASL_SSL`` (:mod:`cdc.stack.kafka_broker`): the pipeline logs
  in as ``cdc`` with ``SCRAM-SHA-512`` (SCRAM-SHA-256 and PLAIN offered too), and the ACLs
  Kafka's authorizer applies give that user what the pipeline needs and nothing on the
  cluster itself.

Certificates live in ``<state>/certs`` (a CA of the stack's own); every password in a file of
its own in ``<state>/secrets`` (0600, as Docker mounts secrets), and ``cdc.yaml`` names those
files (``password_file``, ``sasl_password_file``, the DSN's ``passfile``): it holds no
password.  ``stack.json`` keeps the stack's own record of them, readable by its owner only.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdc.stack.certs import CertFiles, CertificateAuthority, pkcs12_keystore
from cdc.stack.kafka_broker import BrokerSecurity, admin_settings
from cdc.stack.kafka_users import create_acls, merge_acls, operator_acls, producer_acls, upsert_scram_users
from cdc.stack.postgres_server import PostgresTls
from common.config import CDCConfig

#: The Kafka users of a secure stack, by part, and the secret file of each one's password: the
#: operator tools' (``kafka.security``), the producer's (``producer.kafka_security``) and the
#: merge job's (``spark.kafka_security``), each with the ACLs of :mod:`cdc.stack.kafka_users`.
KAFKA_USER = "cdc"
KAFKA_USERS = {"operator": (KAFKA_USER, "kafka_password"), "producer": ("cdc-producer", "kafka_producer_password"),
               "merge": ("cdc-merge", "kafka_merge_password")}


@dataclass
class SecureStack:
    """The certificates and secret files of a secure stack in ``state_dir``."""

    state_dir: Path

    def __post_init__(self) -> None:
        self.secrets_dir = self.state_dir / "secrets"
        self.secrets_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.ca = CertificateAuthority(self.state_dir / "certs")
        self.server: CertFiles = self.ca.issue("server")

    def secret(self, name: str, value: str | None = None) -> str:
        """The path of the secret file ``name``: written with ``value`` (or, when it does not
        exist yet, a new random password), readable by its owner only."""
        path = self.secrets_dir / name
        if value is not None or not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(value if value is not None else secrets.token_urlsafe(24))
        return str(path)

    def mysql_tls(self) -> dict[str, str]:
        return {"ca": self.ca.ca, "cert": self.server.cert, "key": self.server.key}

    def postgres_tls(self) -> PostgresTls:
        return PostgresTls(self.ca.ca, self.server.cert, self.server.key, self.secret("postgres_password"),
                           str(self.secrets_dir / "pgpass"))

    def broker_security(self) -> BrokerSecurity:
        """The Kafka nodes' key store, trust and users (the pipeline's user by PLAIN too)."""
        store_password = self.secret("kafka_keystore_password")
        keystore = pkcs12_keystore(self.server, self.secrets_dir / "kafka-keystore.p12",
                                   Path(store_password).read_text())
        return BrokerSecurity(keystore, store_password, self.ca.ca, self.secret("kafka_broker_password"),
                              {user: self.secret(secret) for user, secret in KAFKA_USERS.values()})

    def kafka_users(self, kafka: dict[str, Any], prefix: str, clean_prefixes: list[str]) -> dict[str, Any]:
        """The pipeline's SCRAM users and their ACLs on the running cluster ``kafka`` (topics
        under ``prefix``, the merge job's outputs under ``clean_prefixes``); the
        ``kafka.security`` each part logs in with, by part."""
        upsert_scram_users(self._admin(kafka),
                           {user: Path(self.secret(secret)).read_text() for user, secret in KAFKA_USERS.values()})
        self.grant_topic_prefix(kafka, prefix, clean_prefixes)
        return {part: {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": user,
                       "sasl_password_file": self.secret(secret), "ca": self.ca.ca}
                for part, (user, secret) in KAFKA_USERS.items()}

    def _admin(self, kafka: dict[str, Any]) -> dict[str, Any]:
        return {"bootstrap.servers": kafka["bootstrap_servers"], **admin_settings(self.broker_security())}

    def grant_topic_prefix(self, kafka: dict[str, Any], prefix: str, clean_prefixes: list[str] | None = None) -> None:
        """Each part's ACLs on the topics under ``prefix`` (a pipeline's ``kafka.topic_prefix``;
        its clean changelogs under ``clean_prefixes``, by default ``<prefix>.clean.``), as an
        operator grants them when a pipeline is set up."""
        clean = clean_prefixes or [f"{prefix}.clean."]
        create_acls(self._admin(kafka), [*operator_acls(KAFKA_USERS["operator"][0], prefix),
                                         *producer_acls(KAFKA_USERS["producer"][0], prefix, clean),
                                         *merge_acls(KAFKA_USERS["merge"][0], prefix, clean)])

    def record(self, mysql: dict[str, Any]) -> dict[str, Any]:
        """What stack.json records of it (``secure``), with the MySQL passwords' files written."""
        return {"ca": self.ca.ca, "mysql_cdc_password_file": self.secret("mysql_cdc_password", mysql["cdc_password"]),
                "mysql_admin_password_file": self.secret("mysql_admin_password", mysql["admin_password"])}


def secure_config(cfg: CDCConfig, data: dict[str, Any]) -> None:
    """``cfg`` (the stack's configuration) connecting as the secure stack ``data`` asks:
    TLS verified against the stack's CA everywhere, passwords from the secret files."""
    sec = data["secure"]
    for section, password_file in ((cfg.source, sec["mysql_cdc_password_file"]),
                                   (cfg.sinks.mysql, sec["mysql_admin_password_file"])):
        section.password = ""
        section.password_file = password_file
        section.ssl.mode, section.ssl.ca = "verify_identity", sec["ca"]
    users = data["kafka"]["users"]
    cfg.kafka.security = type(cfg.kafka.security).model_validate(users["operator"])
    cfg.producer.kafka_security = type(cfg.kafka.security).model_validate(users["producer"])
    cfg.spark.kafka_security = type(cfg.kafka.security).model_validate(users["merge"])
