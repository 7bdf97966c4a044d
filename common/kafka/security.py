"""Kafka security as librdkafka settings, and secrets passed by reference.

:func:`security_settings` maps ``kafka.security`` (security protocol, SASL mechanism and
credentials, CA, client certificate) onto librdkafka's keys; :meth:`KafkaConfig.client_settings`
puts them before ``kafka.client`` for every client the project makes.

Where settings travel as text that others may print (the options of a Spark source end up in
its query plan), a secret goes as a reference instead of its value, in the spelling of Kafka's
config providers: ``${env:NAME}`` (an environment variable of the process that reads it) or
``${file:PATH}`` (a file's content, as Docker and Kubernetes mount secrets).
:func:`resolve_references` replaces them by what they name where the client is made.

Nothing here imports pydantic: the Spark processes that plan and read the ``cdc-kafka``
source use it too.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

from common.errors import ConfigError

#: librdkafka settings whose values are secrets.
SECRET_KEYS = frozenset({"sasl.password", "ssl.key.password", "ssl.keystore.password"})

#: librdkafka settings that ``kafka.security`` sets (``kafka.client`` may not set them too).
SECURITY_KEYS = frozenset({"security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
                           "sasl.password", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
                           "ssl.key.password", "ssl.endpoint.identification.algorithm"})

_REFERENCE = re.compile(r"\$\{(env|file):([^}]+)\}")


def uses_tls(protocol: str) -> bool:
    return protocol.upper() in ("SSL", "SASL_SSL")


def uses_sasl(protocol: str) -> bool:
    return protocol.upper().startswith("SASL_")


def security_settings(security: Any, *, secrets: Mapping[str, str] | None = None) -> dict[str, str]:
    """librdkafka settings of ``security`` (a ``kafka.security`` section); ``secrets``: the
    values to give for :data:`SECRET_KEYS` instead of the section's own (references)."""
    protocol = security.protocol.upper()
    conf: dict[str, str] = {}
    if protocol == "PLAINTEXT":
        return conf
    if uses_sasl(protocol) and not (security.sasl_username and security.sasl_password.get_secret_value()):
        raise ConfigError(f"kafka.security.protocol {protocol} needs kafka.security.sasl_username and sasl_password "
                          "(or sasl_password_file)")
    if bool(security.cert) != bool(security.key):
        raise ConfigError("kafka.security.cert and kafka.security.key go together: give both or neither")
    conf["security.protocol"] = protocol
    if uses_sasl(protocol):
        conf["sasl.mechanism"] = security.sasl_mechanism
        conf["sasl.username"] = security.sasl_username
        conf["sasl.password"] = security.sasl_password.get_secret_value()
    if uses_tls(protocol):
        if security.ca:
            conf["ssl.ca.location"] = security.ca
        if security.cert:
            conf["ssl.certificate.location"] = security.cert
            conf["ssl.key.location"] = security.key
            if security.key_password.get_secret_value():
                conf["ssl.key.password"] = security.key_password.get_secret_value()
        conf["ssl.endpoint.identification.algorithm"] = "https" if security.verify_hostname else "none"
    for key, value in (secrets or {}).items():
        if key in conf:
            conf[key] = value
    return conf


#: The environment variables :func:`export_secret_references` puts secrets in, by setting.
EXPORTED = {"sasl.password": "CDC_KAFKA_SASL_PASSWORD", "ssl.key.password": "CDC_KAFKA_SSL_KEY_PASSWORD"}


def export_secret_references(security: Any, *, environ: Any = None) -> dict[str, str]:
    """References to give instead of the secrets of ``security`` in use: ``${file:PATH}``
    for a secret read from a file (``sasl_password_file``), else ``${env:NAME}`` with the
    secret put into this process's environment as ``NAME`` (:data:`EXPORTED`), which the
    processes it starts afterwards inherit (Spark's JVM and its Python workers, in local
    mode; on a cluster give the executors the variable, or the secret as a file)."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for key, field in (("sasl.password", "sasl_password"), ("ssl.key.password", "key_password")):
        path = getattr(security, f"{field}_file", "")
        value = getattr(security, field).get_secret_value()
        if path:
            out[key] = file_reference(path)
        elif value:
            env[EXPORTED[key]] = value
            out[key] = env_reference(EXPORTED[key])
    return out


#: The JVM Kafka client's login modules, by SASL mechanism.
_LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                  "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                  "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}
#: Kafka's config provider that reads a file of a directory (``${dir:DIR:FILE}``).
DIRECTORY_PROVIDER = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"


def jvm_settings(security: Any) -> dict[str, str]:
    """``kafka.security`` as the JVM Kafka client's settings (Spark's own ``kafka`` source,
    ``spark.kafka_source: jvm``).  Its options are shown in the query plan, so the SASL
    password must come from a file (``sasl_password_file``), which the JVM reads through
    Kafka's directory config provider; the JVMs must allow that provider
    (``-Dorg.apache.kafka.automatic.config.providers=`` :data:`DIRECTORY_PROVIDER`, Kafka
    3.8+).  A client certificate (``cert``/``key``) is not mapped."""
    protocol = security.protocol.upper()
    if protocol == "PLAINTEXT":
        return {}
    conf = {"security.protocol": protocol}
    if uses_sasl(protocol):
        path = Path(security.sasl_password_file) if security.sasl_password_file else None
        if path is None:
            raise ConfigError("spark.kafka_source 'jvm' shows its Kafka options in the query plan: give the SASL "
                              "password as kafka.security.sasl_password_file, not sasl_password")
        user = security.sasl_username.replace("\\", "\\\\").replace('"', '\\"')
        conf.update({"sasl.mechanism": security.sasl_mechanism, "config.providers": "dir",
                     "config.providers.dir.class": DIRECTORY_PROVIDER,
                     "sasl.jaas.config": f'{_LOGIN_MODULES[security.sasl_mechanism]} required username="{user}" '
                                         f'password="${{dir:{path.parent}:{path.name}}}";'})
    if uses_tls(protocol):
        if security.cert:
            raise ConfigError("spark.kafka_source 'jvm': a client certificate (kafka.security.cert) is not passed to "
                              "Spark's kafka source; use the python source")
        if security.ca:
            conf.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": security.ca})
        conf["ssl.endpoint.identification.algorithm"] = "https" if security.verify_hostname else ""
    return conf


def env_reference(name: str) -> str:
    return f"${{env:{name}}}"


def file_reference(path: str) -> str:
    return f"${{file:{path}}}"


def resolve_references(conf: Mapping[str, Any], *, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``conf`` with every value that is a whole ``${env:NAME}`` / ``${file:PATH}`` reference
    replaced by what it names (a file's content without its final line break); a reference
    that names nothing is a :class:`ConfigError` naming the setting and the reference, never
    a value."""
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for key, value in conf.items():
        m = _REFERENCE.fullmatch(value) if isinstance(value, str) else None
        if m is None:
            out[key] = value
            continue
        kind, name = m.groups()
        if kind == "env":
            if name not in env:
                raise ConfigError(f"Kafka setting {key} refers to the environment variable {name}, which is not set "
                                  "in this process")
            out[key] = env[name]
        else:
            try:
                out[key] = Path(name).read_text().rstrip("\r\n")
            except OSError as exc:
                raise ConfigError(f"Kafka setting {key} refers to the file {name}, which cannot be read: "
                                  f"{exc.strerror}") from None
    return out
