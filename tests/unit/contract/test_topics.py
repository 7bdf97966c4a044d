import re

from hypothesis import given
from hypothesis import strategies as st

from contract.topics import clean_topic, table_topic, topic_part

LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


@given(st.text(min_size=1, max_size=64), st.text(min_size=1, max_size=64))
def test_any_mysql_name_gives_a_legal_three_part_topic(db, table):
    topic = table_topic("cdc", db, table)
    assert LEGAL.fullmatch(topic)
    assert topic.split(".") == ["cdc", topic_part(db), topic_part(table)]
    assert clean_topic("cdc", db, table) == f"cdc.clean.{topic_part(db)}.{topic_part(table)}"


@given(st.text(max_size=64))
def test_topic_part_is_idempotent_and_keeps_legal_names(name):
    once = topic_part(name)
    assert topic_part(once) == once and len(once) == len(name)
    if re.fullmatch(r"[a-zA-Z0-9_-]*", name):
        assert once == name


def test_debezium_like_replacement():
    assert table_topic("cdc", "shop", "order items") == "cdc.shop.order_items"
    assert table_topic("cdc", "my.db", "prix€-2024") == "cdc.my_db.prix_-2024"
