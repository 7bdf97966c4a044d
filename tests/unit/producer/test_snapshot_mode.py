"""``snapshot.mode``: Debezium's values mapped onto ``producer.startup``, and the settings refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from common.config import CDCConfig
from common.errors import ConfigError
from producer.snapshot_mode import snapshot_mode


@pytest.mark.parametrize("mode,start,when_needed,every,stream,schemas", [
    ("initial", "initial", "stop", False, True, False),
    ("initial_only", "initial", "stop", False, False, False),
    ("no_data", "latest", "stop", False, True, False),
    ("when_needed", "initial", "snapshot", False, True, False),
    ("always", "initial", "stop", True, True, False),
    ("recovery", "latest", "stop", False, True, True),
])
def test_each_mode_maps_onto_the_startup_settings(mode, start, when_needed, every, stream, schemas):
    m = snapshot_mode(CDCConfig(snapshot={"mode": mode.upper()}))  # (Debezium reads it case-insensitively)
    assert (m.startup.mode, m.startup.when_needed, m.snapshot_every_start, m.stream, m.schemas_every_start,
            m.schemas_on_loss) == (start, when_needed, every, stream, schemas, schemas)
    assert m.setting == f"snapshot.mode: {mode}" and "snapshot.mode: when_needed" in m.purged_hint()


def test_configuration_based_takes_debeziums_flags():
    flags = {"snapshot_data": True, "snapshot_schema": True, "start_stream": False, "snapshot_on_schema_error": True,
             "snapshot_on_data_error": True}
    m = snapshot_mode(CDCConfig(snapshot={"mode": "configuration_based", "configuration_based": flags}))
    assert (m.startup.mode, m.startup.when_needed, m.snapshot_every_start, m.stream, m.schemas_every_start,
            m.schemas_on_loss) == ("initial", "snapshot", True, False, True, True)
    m = snapshot_mode(CDCConfig(snapshot={"mode": "configuration_based", "configuration_based": {}}))
    assert (m.startup.mode, m.snapshot_every_start, m.stream) == ("latest", False, False)  # Debezium's defaults
    with pytest.raises(ConfigError, match="needs snapshot.configuration_based"):
        snapshot_mode(CDCConfig(snapshot={"mode": "configuration_based"}))
    with pytest.raises(ValidationError, match="applies to snapshot.mode: configuration_based only"):
        CDCConfig(snapshot={"mode": "initial", "configuration_based": {}})


def test_without_snapshot_mode_producer_startup_decides():
    cfg = CDCConfig(producer={"startup": {"mode": "earliest", "when_needed": "snapshot"}})
    m = snapshot_mode(cfg)
    assert m.startup is cfg.producer.startup and m.setting == "producer.startup" and m.stream
    assert "producer.startup.when_needed: snapshot" in m.purged_hint()


def test_conflicting_settings_are_refused_naming_both():
    with pytest.raises(ConfigError, match="producer.startup.mode is 'gtid'"):
        snapshot_mode(CDCConfig(snapshot={"mode": "initial"},
                                producer={"startup": {"mode": "gtid", "gtid_set": "0-1-1"}}))
    with pytest.raises(ConfigError, match="stops after purged binlogs, but producer.startup.when_needed is"):
        snapshot_mode(CDCConfig(snapshot={"mode": "always"}, producer={"startup": {"when_needed": "snapshot"}}))
    # the same said twice, or the defaults written out (a configuration file dumped whole): no conflict
    both = CDCConfig(snapshot={"mode": "when_needed"},
                     producer={"startup": {"mode": "initial", "when_needed": "snapshot"}})
    assert snapshot_mode(both).startup.when_needed == "snapshot"
    dumped = CDCConfig(snapshot={"mode": "initial"}, producer={"startup": {"mode": "latest", "when_needed": "stop"}})
    assert snapshot_mode(dumped).startup.mode == "initial"
    with pytest.raises(ConfigError, match="takes no data snapshot, but producer.startup.mode is 'initial'"):
        snapshot_mode(CDCConfig(snapshot={"mode": "no_data"}, producer={"startup": {"mode": "initial"}}))
    # a mode that snapshots no data starts where producer.startup.mode says
    m = snapshot_mode(CDCConfig(snapshot={"mode": "no_data"}, producer={"startup": {"mode": "earliest"}}))
    assert m.startup.mode == "earliest"


@pytest.mark.parametrize("old,new", [("schema_only", "no_data"), ("never", "no_data"),
                                     ("schema_only_recovery", "recovery")])
def test_values_debezium_3_removed_name_their_replacement(old, new):
    with pytest.raises(ValidationError, match=f"removed in Debezium 3: use '{new}'"):
        CDCConfig(snapshot={"mode": old})
