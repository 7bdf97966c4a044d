"""BinlogPosition: parsing, ordering, the 30-digit wire form."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract.position import ENCODED_WIDTH, PART_LIMIT, BinlogPosition, chunk_row_position, chunk_row_positions

parts = st.integers(min_value=0, max_value=PART_LIMIT - 1)
positions = st.builds(BinlogPosition, parts, parts, parts)


# ---------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    "name, index, stem",
    [
        ("mysql-bin.000123", 123, "mysql-bin"),
        ("binlog.1000000", 1000000, "binlog"),
        ("mariadb-bin.000001", 1, "mariadb-bin"),
        ("/var/lib/mysql/binlog.000042", 42, "binlog"),
        ("my.host-bin.000007", 7, "my.host-bin"),
        ("x.0", 0, "x"),
    ],
)
def test_from_binlog_parses_index_and_stem(name, index, stem):
    p = BinlogPosition.from_binlog(name, 4, 1)
    assert (p.file_index, p.pos, p.row, p.stem) == (index, 4, 1, stem)


@pytest.mark.parametrize(
    "name, rebuilt",
    [
        ("mysql-bin.000123", "mysql-bin.000123"),
        ("binlog.1000000", "binlog.1000000"),
        ("binlog.1", "binlog.000001"),  # MySQL pads to 6 digits at least
        ("/var/lib/mysql/binlog.000042", "binlog.000042"),
    ],
)
def test_file_name_rebuilds_mysql_style(name, rebuilt):
    assert BinlogPosition.from_binlog(name, 4).file_name == rebuilt


@pytest.mark.parametrize(
    "bad",
    ["mysql-bin", "mysql-bin.", ".000001", "mysql-bin.00a001", "mysql-bin.-1", "", "mysql-bin.00001 ",
     "mysql-bin.٣", "mysql-bin.99999999999"],
)
def test_from_binlog_rejects_bad_names(bad):
    with pytest.raises(ValueError) as err:
        BinlogPosition.from_binlog(bad, 4)
    assert repr(bad) in str(err.value) or "too large" in str(err.value)


def test_from_binlog_rejects_non_string():
    with pytest.raises(ValueError, match="must be a string"):
        BinlogPosition.from_binlog(123, 4)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "args",
    [(-1, 0, 0), (0, -1, 0), (0, 0, -1), (PART_LIMIT, 0, 0), (0, PART_LIMIT, 0), (0, 0, PART_LIMIT),
     (1.0, 0, 0), (True, 0, 0), ("1", 0, 0)],
)
def test_parts_are_validated(args):
    with pytest.raises(ValueError, match="BinlogPosition"):
        BinlogPosition(*args)


def test_empty_stem_rejected():
    with pytest.raises(ValueError, match="stem"):
        BinlogPosition(1, 2, 3, "")


def test_limits_are_accepted():
    top = BinlogPosition(PART_LIMIT - 1, PART_LIMIT - 1, PART_LIMIT - 1)
    assert top.encode() == "9" * ENCODED_WIDTH
    assert BinlogPosition(0, 0, 0).encode() == "0" * ENCODED_WIDTH


# ---------------------------------------------------------------------------- wire form
def test_encode_layout():
    p = BinlogPosition.from_binlog("mysql-bin.000123", 4567, 2)
    assert p.encode() == "0000000123" "0000004567" "0000000002"
    assert len(p.encode()) == 30


@pytest.mark.parametrize(
    "bad",
    ["", "1" * 29, "1" * 31, "0" * 29 + "a", " " + "0" * 29, "0" * 29 + "\n", "٣" * 30, "-" + "0" * 29,
     None, 123, b"0" * 30],
)
def test_decode_rejects_bad_values_and_names_them(bad):
    with pytest.raises(ValueError) as err:
        BinlogPosition.decode(bad)  # type: ignore[arg-type]
    assert repr(bad) in str(err.value)


def test_decode_takes_stem():
    p = BinlogPosition.decode("000000000100000000020000000003", stem="binlog")
    assert p == BinlogPosition(1, 2, 3)
    assert p.stem == "binlog"
    assert p.file_name == "binlog.000001"


# ---------------------------------------------------------------------------- ordering & helpers
def test_stem_takes_no_part_in_equality_order_or_hash():
    a = BinlogPosition(1, 2, 3, "mysql-bin")
    b = BinlogPosition(1, 2, 3, "binlog")
    assert a == b and hash(a) == hash(b) and not a < b and not b < a


def test_order_is_tuple_order():
    ps = [BinlogPosition(2, 4, 0), BinlogPosition(1, 999, 5), BinlogPosition(1, 999, 0), BinlogPosition(1, 4, 9)]
    assert sorted(ps) == [BinlogPosition(1, 4, 9), BinlogPosition(1, 999, 0), BinlogPosition(1, 999, 5),
                          BinlogPosition(2, 4, 0)]


def test_with_row_and_next_row_keep_stem():
    p = BinlogPosition.from_binlog("binlog.000009", 100)
    assert p.with_row(7) == BinlogPosition(9, 100, 7)
    assert p.next_row().next_row().row == 2
    assert p.next_row().stem == "binlog"
    assert p < p.next_row()
    with pytest.raises(ValueError):
        p.with_row(-1)


def test_positions_are_frozen_and_hashable():
    p = BinlogPosition(1, 2, 3)
    with pytest.raises(Exception):
        p.pos = 5  # type: ignore[misc]
    assert {p: 1}[BinlogPosition(1, 2, 3)] == 1


def test_str_is_readable():
    assert str(BinlogPosition.from_binlog("mysql-bin.000003", 154, 1)) == "mysql-bin.000003:154#1"


# ---------------------------------------------------------------------------- properties
@settings(max_examples=300)
@given(positions)
def test_encode_decode_round_trip(p):
    s = p.encode()
    assert len(s) == ENCODED_WIDTH and s.isascii() and s.isdigit()
    assert BinlogPosition.decode(s) == p


@settings(max_examples=200)
@given(positions, st.sampled_from(["mysql-bin", "binlog", "a.b-c"]))
def test_a_pickled_position_is_the_same_position(p, stem):
    """(The binlog reader process pickles two with every transaction: equal, hashed, ordered
    and frozen alike.)"""
    import dataclasses
    import pickle
    p = dataclasses.replace(p, stem=stem)
    q = pickle.loads(pickle.dumps(p, pickle.HIGHEST_PROTOCOL))
    assert type(q) is BinlogPosition and q == p and hash(q) == hash(p) and q.stem == stem
    assert q <= p and not q < p and q.encode() == p.encode() and repr(q) == repr(p)
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.pos = 1  # type: ignore[misc]


@settings(max_examples=300)
@given(positions, positions)
def test_string_order_equals_position_order(a, b):
    ea, eb = a.encode(), b.encode()
    assert (ea < eb) == (a < b)
    assert (ea == eb) == (a == b)
    # bytewise order too (what Kafka tooling and C-collation text compare)
    assert (ea.encode() < eb.encode()) == (a < b)


@given(positions, st.integers(min_value=1, max_value=1000), parts, parts)
def test_rotation_always_compares_greater(p, step, pos, row):
    if p.file_index + step >= PART_LIMIT:
        return
    rotated = BinlogPosition(p.file_index + step, pos, row, p.stem)
    assert rotated > p
    assert rotated.encode() > p.encode()


@given(st.integers(min_value=0, max_value=PART_LIMIT - 1), st.sampled_from(["mysql-bin", "binlog", "a.b-c"]),
       parts, parts)
def test_file_name_round_trip(index, stem, pos, row):
    p = BinlogPosition(index, pos, row, stem)
    q = BinlogPosition.from_binlog(p.file_name, pos, row)
    assert q == p and q.stem == stem and q.file_name == p.file_name


@given(st.integers(1, 10**6), st.integers(0, 10**9), st.integers(0, 10**4), st.integers(0, 300))
def test_chunk_row_positions_are_each_rows_position(file_index, pos, row, count):
    close = BinlogPosition(file_index, pos, row).encode()
    assert chunk_row_positions(close, count) == [chunk_row_position(close, i) for i in range(count)]


def test_chunk_row_positions_refuse_what_a_row_position_refuses():
    with pytest.raises(ValueError):
        chunk_row_positions("not a position", 1)
    close = BinlogPosition(1, 4, 10**10 - 3).encode()
    assert len(chunk_row_positions(close, 2)) == 2
    with pytest.raises(ValueError):
        chunk_row_positions(close, 3)


# ---------------------------------------------------------------------------- stored resume points
def test_resume_floor_of_a_stored_offset_record():
    from contract.position import resume_floor
    rec = {"resume": {"file": "mysql-bin.000003", "pos": 1234, "last": "0" * 30}, "ts_ms": 1}
    assert resume_floor(rec) == BinlogPosition(3, 1234, 0).encode()
    # after a failover the file base is added, as the producer adds it to its positions
    assert resume_floor({**rec, "file_base": 7}) == BinlogPosition(10, 1234, 0).encode()
    # a record naming no resume point: none
    for bad in (None, {}, {"resume": None}, {"resume": {"file": "", "pos": 0, "gtid_set": "0-1-5"}},
                {"resume": {"file": "not a binlog", "pos": 4}}, {"resume": {"file": "b.000001", "pos": "x"}}, []):
        assert resume_floor(bad) is None, bad


@given(st.integers(1, 10**6), st.integers(4, 10**9), st.integers(0, 10**6), parts)
def test_resume_floor_is_at_or_below_every_change_from_the_resume_point_on(index, pos, base, row):
    """Every change the producer writes after reading from the stored point (at that event or
    a later one, any row) has a position at or above the floor."""
    from contract.position import based, resume_floor
    floor = resume_floor({"resume": {"file": f"mysql-bin.{index:06d}", "pos": pos}, "file_base": base})
    for later in (BinlogPosition(index, pos, row), BinlogPosition(index, pos + 1, 0), BinlogPosition(index + 1, 4, 0)):
        assert floor <= based(later, base).encode()
    assert based(BinlogPosition(index, pos - 1, row), base).encode() < floor
