"""GTID sets (contract.gtid): parsing both flavours, growing, covering."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contract.errors import GtidError
from contract.gtid import GtidSet

UUID_A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
UUID_B = "4f22ab58-82db-22f2-af44-d91bb0530673"


def test_mariadb_positions_parse_and_print_back():
    gs = GtidSet.parse("0-1-42,1-2-7")
    assert gs.flavor == "mariadb" and str(gs) == "0-1-42,1-2-7"
    assert gs.last == {"0": ("1", 42), "1": ("2", 7)}


def test_mysql_sets_keep_the_top_of_each_source():
    gs = GtidSet.parse(f"{UUID_A.upper()}:1-5:7-9,\n{UUID_B}:3")
    assert gs.flavor == "mysql"
    assert gs.last == {UUID_A: ("", 9), UUID_B: ("", 3)}
    assert str(gs) == f"{UUID_A}:1-9,{UUID_B}:1-3"


def test_empty_text_is_the_empty_set():
    assert not GtidSet.parse("") and not GtidSet.parse(None, "mysql")
    assert GtidSet.parse("").covers(GtidSet.parse(""))


@pytest.mark.parametrize("text", ["0-1", "x-1-2", "0-1-2;1-2-3", f"{UUID_A}", "zz:1-2"])
def test_bad_text_is_refused_with_the_element(text):
    with pytest.raises(GtidError, match="GTID"):
        GtidSet.parse(text, "mysql" if "zz" in text or UUID_A in text else "mariadb")


def test_covers_per_source_and_names_what_is_missing():
    have = GtidSet.parse("0-1-42,1-2-7")
    assert have.covers(GtidSet.parse("0-1-40"))
    assert have.covers(GtidSet.parse("0-3-42,1-2-7"))  # another server id, same domain sequence
    assert not have.covers(GtidSet.parse("0-1-43"))
    assert have.missing(GtidSet.parse("0-1-43,2-5-1")) == ["0: 0-1-42 < 0-1-43", "2: nothing < 2-5-1"]


def test_add_moves_a_source_forward_never_back():
    gs = GtidSet.parse("0-1-10")
    gs.add("0-1-11")
    gs.add("0-1-5")
    gs.add("3-9-1")
    gs.add(None)
    assert str(gs) == "0-1-11,3-9-1"
    copy = gs.copy()
    copy.add("0-1-12")
    assert str(gs) == "0-1-11,3-9-1"


@given(st.lists(st.text(alphabet="0123456789-- \n٣²x", max_size=12), max_size=6))
def test_add_takes_what_parsing_takes(gtids):
    """add's plain split of MariaDB's form against the parser's regex: the same set, or the same refusal."""
    added, parsed = GtidSet(), GtidSet()
    for gtid in gtids:
        for gs, step in ((added, added.add), (parsed, lambda g: g and parsed._merge_text(g.strip()))):
            try:
                step(gtid)
            except GtidError:
                gs.last["refused"] = ("", gs.last.get("refused", ("", 0))[1] + 1)
    assert added == parsed


@given(st.dictionaries(st.integers(0, 5), st.integers(1, 10**6), min_size=0, max_size=4),
       st.dictionaries(st.integers(0, 5), st.integers(1, 10**6), min_size=0, max_size=4))
def test_covers_is_per_domain_max_comparison(a, b):
    ga = GtidSet.parse(",".join(f"{d}-1-{n}" for d, n in a.items()), "mariadb")
    gb = GtidSet.parse(",".join(f"{d}-1-{n}" for d, n in b.items()), "mariadb")
    assert ga.covers(gb) == all(d in a and a[d] >= n for d, n in b.items())
    assert GtidSet.parse(str(ga), "mariadb") == ga
    merged = ga.copy()
    for d, n in b.items():
        merged.add(f"{d}-1-{n}")
    assert merged.covers(ga) and merged.covers(gb)


U = "c3ac5846-eb32-11f1-bb14-02fc00000001"


def test_a_mysql_set_with_tags_keeps_each_tag_as_a_source_of_its_own():
    """MySQL 8.3+ tags (``uuid:1-14:batch:1-3``): a tag starts the intervals of ``uuid:tag``;
    tags compare in lower case; the text is the server's syntax again."""
    gs = GtidSet.parse(f"{U}:1-14:Batch:1-3:7,\n{U}:other_tag:2", "mysql")
    assert gs.last == {U: ("", 14), f"{U}:batch": ("", 7), f"{U}:other_tag": ("", 2)}
    assert str(gs) == f"{U}:1-14,{U}:batch:1-7,{U}:other_tag:1-2"
    assert GtidSet.parse(str(gs), "mysql") == gs
    passed = GtidSet("mysql")
    for gtid in (f"{U}:14", f"{U}:batch:7", f"{U}:other_tag:2"):
        passed.add(gtid)
    assert passed.covers(gs) and gs.covers(passed)
    passed = GtidSet.parse(f"{U}:1-14:batch:1-6", "mysql")
    assert not passed.covers(gs) and passed.missing(gs) == [f"{U}:batch: {U}:batch:1-6 < {U}:batch:1-7",
                                                            f"{U}:other_tag: nothing < {U}:other_tag:1-2"]


@pytest.mark.parametrize("text", [f"{U}:batch", f"{U}:1-3:9tag:1", f"{U}:{'t' * 33}:1"])
def test_a_tag_mysql_would_refuse_is_refused(text):
    if text.endswith(":batch"):  # (a tag without its transactions: nothing of that source)
        assert GtidSet.parse(text, "mysql").last == {}
        return
    with pytest.raises(GtidError):
        GtidSet.parse(text, "mysql")
