"""The sections the parts declare for themselves (issue 56): a sink's settings registered
beside the sink appear under ``sinks.<name>`` with everything the shared sections have
(validation naming the key, environment overrides, secrets from files, the dumped file),
and the shared configuration names no sink's or route's settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field, SecretStr

from common import config, config_sections
from common.config import CDCConfig, Section, SinksConfig, config_env_keys, dump_config, load_config
from common.config_sections import register_sink_settings, sink_settings
from common.errors import ConfigError


class ProbeOptions(Section):
    depth: int = Field(1, ge=1)


class ProbeSinkConfig(Section):
    """The settings of a sink no module of the project declares."""

    enabled: bool = False
    url: str = ""
    token: SecretStr = SecretStr("")
    token_file: str = ""
    batch: int = Field(10, gt=0)
    options: ProbeOptions = Field(default_factory=ProbeOptions)


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> type[ProbeSinkConfig]:
    """``sinks.probe`` registered for one test (the registry as it was after it)."""
    monkeypatch.setattr(config_sections, "_SINK_SETTINGS", sink_settings())
    return register_sink_settings("probe")(ProbeSinkConfig)


def _load(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> CDCConfig:
    path = tmp_path / "cdc.yaml"
    path.write_text(text)
    return load_config(path, environ=environ or {})


def test_a_name_no_sink_registered_is_an_unknown_key(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"sinks\.probe: Extra inputs are not permitted"):
        _load(tmp_path, "sinks:\n  probe:\n    enabled: true\n")


def test_a_registered_sink_section_is_read_validated_and_defaulted(tmp_path: Path, probe):
    cfg = _load(tmp_path, "sinks:\n  probe:\n    enabled: true\n    url: http://x\n    options: {depth: 3}\n")
    assert isinstance(cfg.sinks.probe, probe)
    assert (cfg.sinks.probe.enabled, cfg.sinks.probe.url, cfg.sinks.probe.options.depth) == (True, "http://x", 3)
    assert CDCConfig().sinks.probe == probe()  # absent: its defaults
    assert list(CDCConfig().sinks.sections())[-1] == "probe"  # built after the sinks registered before it
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, "sinks:\n  probe:\n    colour: red\n    batch: 0\n    options: {depth: 0}\n")
    text = str(err.value)
    assert "sinks.probe.colour" in text and "sinks.probe.batch" in text and "sinks.probe.options.depth" in text


def test_a_registered_sink_section_is_set_from_the_environment(tmp_path: Path, probe):
    assert {"CDC__SINKS__PROBE__URL", "CDC__SINKS__PROBE__OPTIONS__DEPTH"} <= config_env_keys()
    cfg = _load(tmp_path, "", {"CDC__SINKS__PROBE__URL": "[x", "CDC__SINKS__PROBE__BATCH": "7",
                               "CDC__SINKS__PROBE__OPTIONS__DEPTH": "2", "CDC__SINKS__PROBE__TOKEN": "12"})
    assert (cfg.sinks.probe.url, cfg.sinks.probe.batch, cfg.sinks.probe.options.depth) == ("[x", 7, 2)
    assert cfg.sinks.probe.token.get_secret_value() == "12"  # a string taken verbatim
    with pytest.raises(ConfigError, match="CDC__SINKS__PROBE__COLOUR"):
        _load(tmp_path, "", {"CDC__SINKS__PROBE__COLOUR": "red"})


def test_a_registered_sink_section_reads_its_secret_files_and_round_trips(tmp_path: Path, probe):
    (tmp_path / "token").write_text("from-a-file\n")
    cfg = _load(tmp_path, f"sinks:\n  probe:\n    token_file: {tmp_path / 'token'}\n    batch: 3\n")
    assert cfg.sinks.probe.token.get_secret_value() == "from-a-file"
    text = dump_config(cfg)
    assert "from-a-file" not in text and str(tmp_path / "token") in text
    again = _load(tmp_path, text)
    assert again == cfg and again.sinks.probe.batch == 3
    view = again.for_part("merge").for_source()
    assert view.sinks.probe == cfg.sinks.probe


def test_a_sink_section_is_validated_when_assigned(probe):
    sinks = SinksConfig()
    sinks.probe.batch = 4
    with pytest.raises(ValueError, match="batch"):
        sinks.probe.batch = 0
    with pytest.raises(ValueError, match="probe"):
        sinks.probe = 5


def test_a_second_model_for_a_registered_section_is_refused(probe):
    with pytest.raises(ConfigError, match="sinks.probe: ProbeSinkConfig and Other"):
        register_sink_settings("probe")(type("Other", (Section,), {}))
    assert register_sink_settings("probe")(probe) is probe  # (registering the same model again: no change)


def test_the_shared_configuration_declares_no_sink_or_route_settings():
    own = {name for name, obj in vars(config).items()
           if isinstance(obj, type) and obj.__module__ == config.__name__}
    assert not {n for n in own if n.endswith("SinkConfig") or n in ("RouteConfig", "OriginColumns", "ExtractRule")}
    assert set(SinksConfig.model_fields) == {"schema_changes", "tombstone_purge_s"}  # what every sink follows
    source = Path(config.__file__).read_text().lower()
    assert not [word for word in ("postgres", "mysqlsink", "delta", "iceberg", "origin_", "extract_")
                if word in source]
