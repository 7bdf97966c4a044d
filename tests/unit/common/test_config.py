from pathlib import Path

import pytest

from common.config import CDCConfig, config_env_keys, dump_config, load_config
from common.errors import ConfigError


def test_defaults_validate_and_round_trip(tmp_path: Path):
    path = tmp_path / "cdc.yaml"
    cfg = CDCConfig()
    cfg.source.password = "s3cret"
    path.write_text(dump_config(cfg))
    again = load_config(path)
    assert again == cfg
    assert again.source.password.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(again)  # secrets never shown in logs or reprs


def test_environment_overrides_nested_keys(tmp_path: Path):
    path = tmp_path / "cdc.yaml"
    path.write_text("source:\n  host: db1\n")
    cfg = load_config(path, environ={"CDC__SOURCE__HOST": "db2", "CDC__SOURCE__PORT": "3307",
                                     "CDC__PRODUCER__STARTUP__MODE": "earliest",
                                     "CDC__SOURCE__EXCLUDE_DATABASES": "[a, b]"})
    assert (cfg.source.host, cfg.source.port) == ("db2", 3307)
    assert cfg.producer.startup.mode == "earliest"
    assert cfg.source.exclude_databases == ["a", "b"]


def test_unknown_environment_key_is_an_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="CDC__SOURCE__HOTS"):
        load_config(tmp_path / "none.yaml", environ={"CDC__SOURCE__HOTS": "x"})


def test_variable_expansion_and_missing_variable(tmp_path: Path):
    path = tmp_path / "cdc.yaml"
    path.write_text("source:\n  password: ${DB_PW}\n")
    assert load_config(path, environ={"DB_PW": "pw"}).source.password.get_secret_value() == "pw"
    with pytest.raises(ConfigError, match="DB_PW"):
        load_config(path, environ={})


def test_invalid_values_are_reported_with_their_location(tmp_path: Path):
    path = tmp_path / "cdc.yaml"
    path.write_text("snapshot:\n  chunk_size: 0\nsource:\n  signal_table: nodot\n  colour: red\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert "snapshot.chunk_size" in text and "source.signal_table" in text and "source.colour" in text


def test_missing_file_names_the_fix(tmp_path: Path):
    with pytest.raises(ConfigError, match="cdc stack up"):
        load_config(tmp_path / "missing.yaml", environ={})


def test_env_keys_cover_nested_sections():
    keys = config_env_keys()
    assert {"CDC__SOURCE__HOST", "CDC__KAFKA__BOOTSTRAP_SERVERS", "CDC__PRODUCER__STARTUP__MODE",
            "CDC__SINKS__POSTGRES__DSN", "CDC__SPARK__KAFKA_SOURCE"} <= keys
    assert "CDC__SOURCE" not in keys


def test_string_values_from_the_environment_are_taken_verbatim(tmp_path: Path):
    cfg = load_config(tmp_path / "none.yaml", environ={"CDC__SOURCE__PASSWORD": "12345", "CDC__SOURCE__HOST": "[x",
                                                       "CDC__SINKS__POSTGRES__DSN": "%x*y"})
    assert cfg.source.password.get_secret_value() == "12345"
    assert cfg.source.host == "[x"
    assert cfg.sinks.postgres.dsn.get_secret_value() == "%x*y"


def test_schema_change_rules_first_match_wins_and_bad_regexes_are_refused(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_text("sinks:\n  schema_changes:\n"
                    "    - {tables: 'shop\\.orders', columns: stop}\n"
                    "    - {tables: 'shop\\..*', columns: ignore, drop_table: drop}\n")
    cfg = load_config(path)
    assert cfg.sinks.schema_rule("shop", "orders").columns == "stop"
    assert cfg.sinks.schema_rule("shop", "items").columns == "ignore"
    assert cfg.sinks.schema_rule("shop", "items").drop_table == "drop"
    other = cfg.sinks.schema_rule("crm", "orders")
    assert (other.columns, other.drop_table, other.rename_table) == ("evolve", "keep", "rename")
    path.write_text("sinks:\n  schema_changes:\n    - {tables: 'shop\\.(orders', columns: stop}\n")
    with pytest.raises(ConfigError, match="not a regular expression"):
        load_config(path)
    path.write_text("sinks:\n  schema_changes:\n    - {tables: 'x', columns: maybe}\n")
    with pytest.raises(ConfigError, match="columns"):
        load_config(path)


def test_signal_channels_default_both_and_either_can_be_off(tmp_path: Path):
    assert CDCConfig().source.signal_channels == ["source", "kafka"]
    path = tmp_path / "cdc.yaml"
    path.write_text("source:\n  signal_channels: [kafka]\n")
    assert load_config(path, environ={}).source.signal_channels == ["kafka"]
    for raw, expected in (("source", ["source"]), ("kafka, source", ["kafka", "source"]), ("[kafka]", ["kafka"]),
                          ("kafka,kafka", ["kafka"]), ("", [])):
        cfg = load_config(path, environ={"CDC__SOURCE__SIGNAL_CHANNELS": raw})
        assert cfg.source.signal_channels == expected, raw
    with pytest.raises(ConfigError, match="source.signal_channels"):
        load_config(path, environ={"CDC__SOURCE__SIGNAL_CHANNELS": "source,table"})


def test_snapshot_read_only_is_off_by_default():
    assert CDCConfig().snapshot.read_only is False


def test_debezium_input_is_set_from_the_environment_and_refuses_what_it_cannot_do_yet(tmp_path: Path):
    path = tmp_path / "cdc.yaml"
    path.write_text("kafka:\n  topic_prefix: dbserver1\n")
    cfg = load_config(path, environ={"CDC__KAFKA__INPUT": "debezium"})
    assert (cfg.kafka.input, cfg.kafka.topic_prefix) == ("debezium", "dbserver1")
    assert load_config(path).kafka.input == "producer"
    with pytest.raises(ConfigError, match="kafka.input"):
        load_config(path, environ={"CDC__KAFKA__INPUT": "maxwell"})
    path.write_text("kafka:\n  input: debezium\nsinks:\n  schema_changes:\n    - {tables: 'a\\..*', columns: stop}\n")
    with pytest.raises(ConfigError, match="columns: stop"):
        load_config(path)
    path.write_text("kafka:\n  input: debezium\nroutes:\n  - {schema: 'shop_.*', table: orders, target: shop.orders}\n")
    with pytest.raises(ConfigError, match="routes"):
        load_config(path)


def test_the_producer_does_not_run_on_a_debezium_input(tmp_path: Path):
    from producer.app import ProducerApp
    cfg = CDCConfig()
    cfg.kafka.input = "debezium"
    with pytest.raises(ConfigError, match="Debezium's"):
        ProducerApp(cfg)


def test_secrets_from_files_as_docker_mounts_them(tmp_path: Path):
    (tmp_path / "db_pw").write_text("from-a-file\n")
    (tmp_path / "kafka_pw").write_text("kafka-secret")
    path = tmp_path / "cdc.yaml"
    path.write_text(f"source:\n  password_file: {tmp_path / 'db_pw'}\n"
                    f"kafka:\n  security:\n    protocol: SASL_SSL\n    sasl_username: cdc\n")
    cfg = load_config(path, environ={"CDC__KAFKA__SECURITY__SASL_PASSWORD_FILE": str(tmp_path / "kafka_pw")})
    assert cfg.source.password.get_secret_value() == "from-a-file"  # the final line break dropped
    assert cfg.kafka.security.sasl_password.get_secret_value() == "kafka-secret"
    text = dump_config(cfg)  # the file's name is written, never its content
    assert "from-a-file" not in text and "kafka-secret" not in text and str(tmp_path / "db_pw") in text
    again = path.with_name("again.yaml")
    again.write_text(text)
    assert load_config(again, environ={}).source.password.get_secret_value() == "from-a-file"


def test_a_secret_file_that_cannot_be_read_or_disagrees_is_an_error_without_the_secret(tmp_path: Path):
    path = tmp_path / "cdc.yaml"
    path.write_text(f"source:\n  password_file: {tmp_path / 'missing'}\n")
    with pytest.raises(ConfigError, match="password_file: cannot read .*missing: No such file"):
        load_config(path, environ={})
    (tmp_path / "pw").write_text("one")
    path.write_text(f"source:\n  password: two\n  password_file: {tmp_path / 'pw'}\n")
    with pytest.raises(ConfigError, match="give password or password_file, not both") as err:
        load_config(path, environ={})
    assert "one" not in str(err.value).replace("not both", "") and "two" not in str(err.value)


def test_kafka_security_maps_onto_librdkafka_before_the_client_settings():
    cfg = CDCConfig()
    assert cfg.kafka.client_settings() == {}
    sec = cfg.kafka.security
    sec.protocol, sec.sasl_username, sec.sasl_password, sec.ca = "SASL_SSL", "cdc", "pw", "/ca.pem"
    cfg.kafka.client = {"linger.ms": 7}
    assert cfg.kafka.client_settings() == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "cdc",
        "sasl.password": "pw", "ssl.ca.location": "/ca.pem", "ssl.endpoint.identification.algorithm": "https",
        "linger.ms": 7}
    assert cfg.kafka.client_settings(secrets={"sasl.password": "${env:X}"})["sasl.password"] == "${env:X}"
    sec.protocol = "SASL_PLAINTEXT"
    assert "ssl.ca.location" not in cfg.kafka.client_settings()
    sec.sasl_password = ""
    with pytest.raises(ConfigError, match="needs kafka.security.sasl_username and sasl_password"):
        cfg.kafka.client_settings()


def test_kafka_client_may_not_set_what_kafka_security_sets(tmp_path: Path):
    path = tmp_path / "cdc.yaml"
    path.write_text("kafka:\n  security:\n    protocol: SSL\n  client:\n    security.protocol: SSL\n")
    with pytest.raises(ConfigError, match="kafka.client sets security.protocol, which kafka.security sets"):
        load_config(path, environ={})
    path.write_text("kafka:\n  client:\n    security.protocol: SSL\n")  # without kafka.security: as before
    assert load_config(path, environ={}).kafka.client_settings() == {"security.protocol": "SSL"}


def test_secret_references_resolve_from_the_environment_and_files(tmp_path: Path):
    from common.kafka.security import resolve_references
    (tmp_path / "pw").write_text("filed\n")
    conf = {"sasl.password": f"${{file:{tmp_path / 'pw'}}}", "ssl.key.password": "${env:KEYPW}", "linger.ms": 5}
    assert resolve_references(conf, environ={"KEYPW": "envd"}) == {
        "sasl.password": "filed", "ssl.key.password": "envd", "linger.ms": 5}
    with pytest.raises(ConfigError, match="ssl.key.password refers to the environment variable KEYPW"):
        resolve_references(conf, environ={})


def test_kafka_security_for_spark_jvm_kafka_source_keeps_the_password_in_its_file(tmp_path: Path):
    from common.kafka.security import DIRECTORY_PROVIDER, jvm_settings
    (tmp_path / "kafka_password").write_text("jvm-secret")
    cfg = CDCConfig()
    sec = cfg.kafka.security
    sec.protocol, sec.sasl_username, sec.ca = "SASL_SSL", "cdc", "/certs/ca.pem"
    sec.sasl_password_file = str(tmp_path / "kafka_password")
    conf = jvm_settings(sec)
    assert conf == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "config.providers": "dir",
        "config.providers.dir.class": DIRECTORY_PROVIDER,
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="cdc" '
                            f'password="${{dir:{tmp_path}:kafka_password}}";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/certs/ca.pem",
        "ssl.endpoint.identification.algorithm": "https"}
    assert "jvm-secret" not in str(conf)
    sec.sasl_password_file = ""
    sec.sasl_password = "inline"
    with pytest.raises(ConfigError, match="give the SASL password as kafka.security.sasl_password_file"):
        jvm_settings(sec)


def test_kafka_compression_reaches_every_producer_and_a_bad_one_is_named(tmp_path: Path):
    from common.kafka.clients import producer_config
    path = tmp_path / "cdc.yaml"
    path.write_text("kafka:\n  compression: lz4\n")
    cfg = load_config(path, environ={})
    assert producer_config(cfg.kafka)["compression.type"] == "lz4"
    assert producer_config(CDCConfig().kafka)["compression.type"] == "none"
    path.write_text("kafka:\n  compression: brotli\n")
    with pytest.raises(ConfigError, match="kafka.compression"):
        load_config(path, environ={})


def test_the_lakes_compact_min_files_is_off_or_at_least_two(tmp_path: Path):
    path = tmp_path / "cdc.yaml"
    path.write_text("sinks:\n  iceberg:\n    compact_min_files: 1\n")
    with pytest.raises(ConfigError, match="sinks.iceberg.compact_min_files"):
        load_config(path)
    cfg = load_config(path, environ={"CDC__SINKS__ICEBERG__COMPACT_MIN_FILES": "0",
                                     "CDC__SINKS__DELTA__COMPACT_MIN_FILES": "4"})
    assert (cfg.sinks.iceberg.compact_min_files, cfg.sinks.delta.compact_min_files) == (0, 4)
    assert CDCConfig().sinks.delta.compact_min_files == 10
