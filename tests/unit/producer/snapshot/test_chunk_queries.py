
from hypothesis import given, settings
from hypothesis import strategies as st

from producer.snapshot.chunk_queries import _compare, chunk_query


def test_composite_keyset_query_shape():
    sql, params = chunk_query("d", "t", ["a", "b", "v"], ["a", "b"], after=(1, "x"), upto=(9, "z"),
                              condition="`v` > 0", limit=100)
    assert sql == ("SELECT `a`, `b`, `v` FROM `d`.`t` WHERE ((`a` > %s) OR (`a` = %s AND `b` > %s)) AND "
                   "((`a` < %s) OR (`a` = %s AND `b` <= %s)) AND (`v` > 0) ORDER BY `a`, `b` LIMIT 100")
    assert params == [1, 1, "x", 9, 9, "z"]


def test_a_keyless_tables_whole_read_has_no_order_and_no_limit():
    sql, params = chunk_query("d", "t", ["a", "b"], [], after=None, upto=None, condition="`a` > 5", limit=None)
    assert (sql, params) == ("SELECT `a`, `b` FROM `d`.`t` WHERE (`a` > 5)", [])


def test_identifiers_are_quoted():
    sql, _ = chunk_query("we`ird", "t t", ["c`1"], ["c`1"], after=None, upto=None, condition=None, limit=5)
    assert "`we``ird`.`t t`" in sql and "`c``1`" in sql


def sql_to_py(sql, keys):
    out, i = [], 0
    for piece in sql.split("%s"):
        out.append(piece)
        out.append(f"_p[{i}]")
        i += 1
    expr = "".join(out[:-1])
    for k in keys:
        expr = expr.replace(f"`{k}`", f"env[{k!r}]")
    return expr.replace(" = ", " == ").replace(" AND ", " and ").replace(" OR ", " or ")


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.tuples(*[st.integers(0, 3)] * n),
                                                                           min_size=2, max_size=30))))
def test_keyset_predicates_match_tuple_order(data):
    n, rows = data
    keys = [f"k{i}" for i in range(n)]
    pivot = rows[0]
    for row in rows:
        env = dict(zip(keys, row))
        gt = eval(sql_to_py(_compare(keys, pivot, ">")[0], keys), {"env": env, "_p": _compare(keys, pivot, ">")[1]})
        le = eval(sql_to_py(_compare(keys, pivot, "<=")[0], keys), {"env": env, "_p": _compare(keys, pivot, "<=")[1]})
        assert gt == (tuple(row) > tuple(pivot))
        assert le == (tuple(row) <= tuple(pivot))
