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
