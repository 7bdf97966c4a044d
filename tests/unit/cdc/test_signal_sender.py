import pytest

from cdc.errors import CommandError
from cdc.signal_sender import choose_channel
from common.config import CDCConfig


def _cfg(channels, read_only=False) -> CDCConfig:
    cfg = CDCConfig()
    cfg.source.signal_channels = channels
    cfg.snapshot.read_only = read_only
    return cfg


@pytest.mark.parametrize("channels,read_only,expected", [
    (["source", "kafka"], False, "source"),
    (["kafka", "source"], False, "source"),
    (["source", "kafka"], True, "kafka"),   # read-only: the CDC user writes nothing into the source
    (["kafka"], False, "kafka"),
    (["kafka"], True, "kafka"),
    (["source"], False, "source"),
])
def test_the_signal_table_unless_it_is_off_or_read_only(channels, read_only, expected):
    assert choose_channel(_cfg(channels, read_only)) == expected


def test_a_forced_channel_must_be_one_the_producer_reads():
    assert choose_channel(_cfg(["source", "kafka"]), "kafka") == "kafka"
    assert choose_channel(_cfg(["source", "kafka"], read_only=True), "source") == "source"
    with pytest.raises(CommandError, match="kafka signal channel is off"):
        choose_channel(_cfg(["source"]), "kafka")
    with pytest.raises(CommandError, match="source signal channel is off"):
        choose_channel(_cfg(["kafka"]), "source")


def test_no_channel_to_send_through_is_a_clear_error():
    with pytest.raises(CommandError, match="both signal channels are off"):
        choose_channel(_cfg([]))
    with pytest.raises(CommandError, match="read_only is on.*add kafka to source.signal_channels"):
        choose_channel(_cfg(["source"], read_only=True))
