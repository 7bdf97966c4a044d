"""The conversion rules (contract.conversion_rules) against Python's datetime, and their C
(contract.conversion_rules_c) against the rules themselves: the generated header compiled with
a small export wrapper and called through ctypes, rule by rule, on the same arguments."""

from __future__ import annotations

import ctypes
import datetime
import inspect
import os
from decimal import Context, Decimal
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract import conversion_rules as rules
from contract.conversion_rules_c import RuleError, c_source
from tests.native_helpers import c_compiler
from tests.unit.producer.binlog.test_row_decoder import _pack_decimal

ROOT = Path(__file__).resolve().parents[3]
EPOCH = datetime.date(1970, 1, 1).toordinal()
SOURCE = inspect.getsource(rules)
WIDE = Context(prec=100)  # (Decimal arithmetic rounds to 28 digits by default)


def _date_or_none(y: int, m: int, d: int) -> datetime.date | None:
    try:
        return datetime.date(y, m, d)
    except ValueError:
        return None


# =============================================================================== the rules
@given(st.integers(-5, 10_005), st.integers(-1, 14), st.integers(-1, 33))
def test_dates_are_pythons(y, m, d):
    date = _date_or_none(y, m, d)
    assert rules.valid_date(y, m, d) == (date is not None)
    assert rules.date_days(y, m, d) == (None if date is None else date.toordinal() - EPOCH)
    if date is not None:
        assert rules.days_since_epoch(y, m, d) == date.toordinal() - EPOCH


@given(st.integers(-800_000, 3_000_000))
def test_civil_date_is_pythons_fromordinal(days):
    try:
        date = datetime.date.fromordinal(EPOCH + days)
    except (ValueError, OverflowError):
        date = None
    assert rules.civil_date(days) == (None if date is None else date.year * 10000 + date.month * 100 + date.day)


@given(st.integers(-(1 << 63), (1 << 63) - 1), st.sampled_from([1, 1000]))
def test_time_fields_are_hours_minutes_seconds_and_microseconds(v, scale):
    us = abs(v) * scale
    seconds, micro = divmod(us, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    fields = hours * 10 ** 10 + minute * 10 ** 8 + second * 10 ** 6 + micro
    assert rules.time_fields(v, scale) == (-fields if v < 0 else fields)


@given(st.integers(0, (1 << 40) - 1), st.integers(0, 6), st.sampled_from([1, 1000]), st.data())
def test_a_datetime2_is_its_wall_clock(d, fsp, unit, data):
    """The packed DATETIME2 read the way python-mysql-replication reads it (a datetime, or
    none), in ``unit`` microseconds floor-divided."""
    size = (fsp + 1) // 2
    f = data.draw(st.integers(0, (1 << 8 * size) - 1)) if size else 0
    year_month = d >> 22 & 0x1FFFF
    date = _date_or_none(year_month // 13, year_month % 13, d >> 17 & 31)
    hour, minute, second = d >> 12 & 31, d >> 6 & 63, d & 63
    micro = (f // 10 if fsp % 2 else f) * 10 ** (6 - fsp)
    expected = None
    if date is not None and hour < 24 and minute < 60 and second < 60 and micro <= 999_999:
        wall = datetime.datetime(date.year, date.month, date.day, hour, minute, second, micro)
        us = (wall - datetime.datetime(1970, 1, 1)) // datetime.timedelta(microseconds=1)
        expected = us // unit
    assert rules.datetime2_units(d, f, fsp, unit) == expected


_DATETIME_TEXT = re.compile(rb"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?\Z")


def _datetime_text_reference(s: bytes, unit: int) -> int | None:
    m = _DATETIME_TEXT.match(s)
    if not m or not s.isascii():
        return None
    date = _date_or_none(int(m[1]), int(m[2]), int(m[3]))
    if date is None or int(m[4]) > 23 or int(m[5]) > 59 or int(m[6]) > 59:
        return None
    micro = int(m[7].ljust(6, b"0")) if m[7] else 0
    wall = datetime.datetime(date.year, date.month, date.day, int(m[4]), int(m[5]), int(m[6]), micro)
    return (wall - datetime.datetime(1970, 1, 1)) // datetime.timedelta(microseconds=1) // unit


_texts = st.one_of(
    st.datetimes().map(lambda t: t.isoformat(" ").encode()),
    st.builds(lambda t, n: t.isoformat(" ", "microseconds")[:20 + n].encode(), st.datetimes(), st.integers(1, 6)),
    st.builds(lambda t, junk, at: (lambda s: s[:at] + junk + s[at + 1:])(t.isoformat(" ").encode()),
              st.datetimes(), st.binary(min_size=1, max_size=1), st.integers(0, 25)),
    st.binary(max_size=28))


@given(_texts, st.sampled_from([1, 1000]))
def test_a_datetime_text_is_its_wall_clock(s, unit):
    assert rules.datetime_text_units(s, unit) == _datetime_text_reference(s, unit)


@given(st.one_of(st.dates().map(lambda d: d.isoformat().encode()), _texts.map(lambda s: s[:10]),
                 st.binary(max_size=12)))
def test_a_date_text_is_its_day(s):
    m = re.fullmatch(rb"(\d{4})-(\d\d)-(\d\d)", s)
    date = _date_or_none(int(m[1]), int(m[2]), int(m[3])) if m else None
    assert rules.date_text_days(s) == (None if date is None else date.toordinal() - EPOCH)


@given(st.integers(1, 65), st.data())
def test_a_packed_decimal_is_its_digits(precision, data):
    scale = data.draw(st.integers(0, min(precision, 30)))
    unscaled = data.draw(st.integers(-(10 ** precision) + 1, 10 ** precision - 1))
    packed = _pack_decimal(Decimal(unscaled).scaleb(-scale, WIDE), precision, scale)
    assert rules.packed_decimal(b"\x07" + packed, 1, precision, scale) == unscaled


@given(st.one_of(st.integers(-(1 << 65), 1 << 65).map(lambda v: str(v).encode()), st.binary(max_size=21)))
def test_an_int_text_is_its_number_in_64_bits(s):
    ok = re.fullmatch(rb"-?\d{1,19}", s) is not None and -(1 << 63) <= int(s) < (1 << 63)
    assert rules.int_text(s) == (int(s) if ok else None)


@given(st.integers(0, 12), st.one_of(st.integers(-(10 ** 38) + 1, 10 ** 38 - 1), st.integers()), st.data())
def test_a_decimal_text_is_its_digits(scale, unscaled, data):
    text = f"{Decimal(unscaled).scaleb(-scale, WIDE):.{scale}f}".encode()
    text = data.draw(st.one_of(st.just(text), st.binary(max_size=20), st.builds(
        lambda at, junk: text[:at] + junk + text[at + 1:], st.integers(0, len(text)),
        st.binary(min_size=1, max_size=1))))
    form = rb"-?\d+" + (rb"\.\d{%d}" % scale if scale else b"")
    digits = len(text.lstrip(b"-")) - (1 if scale else 0)
    expected = int(text.replace(b".", b"")) if re.fullmatch(form, text) and digits <= 38 else None
    assert rules.decimal_text(text, scale) == expected


# =============================================================================== the C of the rules
def test_the_built_header_is_the_rules():
    """setup.py wrote contract/type_rules.h from these rules when it built the extensions."""
    assert (ROOT / "contract" / "type_rules.h").read_text() == c_source(SOURCE)


#: Arguments within each rule's domain (an int64 never overflows).
_ARGS = {
    "is_leap": (st.integers(-10**12, 10**12),),
    "valid_date": (st.integers(-20, 10_020), st.integers(-3, 15), st.integers(-3, 34)),
    "days_since_epoch": (st.integers(1, 9999), st.integers(1, 12), st.integers(1, 31)),
    "date_days": (st.integers(-20, 10_020), st.integers(-3, 15), st.integers(-3, 34)),
    "civil_date": (st.integers(-10**9, 10**9),),
    "time_fields": (st.integers(-(1 << 63), (1 << 63) - 1), st.sampled_from([1, 1000])),
    "packed_date_days": (st.integers(0, (1 << 23) - 1),),
    "packed_time_seconds": (st.integers(0, (1 << 17) - 1),),
    "datetime2_fraction": (st.integers(0, (1 << 24) - 1), st.integers(0, 6), st.sampled_from([1, 1000])),
    "datetime2_units": (st.integers(0, (1 << 40) - 1), st.integers(0, (1 << 24) - 1), st.integers(0, 6),
                        st.sampled_from([1, 1000])),
    "digits": (st.binary(max_size=24), st.integers(0, 24), st.integers(0, 24)),
    "three_fields": (_texts, st.integers(0, 12), st.sampled_from([2, 4]), st.sampled_from([45, 58])),
    "date_text_prefix_days": (_texts,),
    "date_text_days": (st.one_of(_texts, _texts.map(lambda s: s[:10])),),
    "datetime_text_units": (_texts, st.sampled_from([1, 1000])),
    "int_text": (st.one_of(st.binary(max_size=22), st.integers(-(1 << 64), 1 << 64).map(lambda v: str(v).encode())),),
    "decimal_group": (st.binary(max_size=8), st.integers(0, 8), st.integers(1, 4), st.integers(0, 9),
                      st.sampled_from([0, 255]), st.integers(0, 1)),
    "packed_decimal": st.integers(1, 38).flatmap(lambda p: st.integers(0, p).flatmap(lambda sc: st.tuples(
        st.one_of(st.binary(max_size=20), st.integers(-(10 ** p) + 1, 10 ** p - 1).map(
            lambda u: b"\x01" + _pack_decimal(Decimal(u).scaleb(-sc, WIDE), p, sc))),
        st.integers(0, 2), st.just(p), st.just(sc)))),
    "decimal_text": (st.one_of(st.binary(max_size=42), st.integers(-(10 ** 39), 10 ** 39).map(
        lambda u: str(u).encode())), st.integers(0, 12)),
}


def _params(rule) -> list[str]:
    return [str(p.annotation) for p in inspect.signature(rule).parameters.values()]


def _wrapper() -> str:
    """The header, and per rule an exported ``call_<rule>(args..., int64_t *ok)``."""
    out = ["#include <stddef.h>", "#include <stdint.h>", "typedef ptrdiff_t Py_ssize_t;", '#include "type_rules.h"']
    for rule in rules.RULES:
        params, args = [], []
        for i, kind in enumerate(_params(rule)):
            if kind == "bytes":
                params += [f"const unsigned char *a{i}", f"Py_ssize_t n{i}"]
                args += [f"a{i}", f"n{i}"]
            else:
                params.append(f"int64_t a{i}")
                args.append(f"a{i}")
        params.append("int64_t *ok")
        ret = str(inspect.signature(rule).return_annotation)
        if ret == "wide | None":  # (its high 64 bits through *hi)
            params.append("int64_t *hi")
            body = (f"__int128 r = 0; *ok = rule_{rule.__name__}({', '.join(args + ['&r'])}); "
                    "*hi = (int64_t)(r >> 64); return (int64_t)r;")
        elif ret == "wide":
            params.append("int64_t *hi")
            body = (f"__int128 r = rule_{rule.__name__}({', '.join(args)}); *ok = 1; "
                    "*hi = (int64_t)(r >> 64); return (int64_t)r;")
        elif ret == "int | None":
            body = f"int64_t r = 0; *ok = rule_{rule.__name__}({', '.join(args + ['&r'])}); return r;"
        else:
            body = f"*ok = 1; return (int64_t)rule_{rule.__name__}({', '.join(args)});"
        out.append(f"int64_t call_{rule.__name__}({', '.join(params)}) {{ {body} }}")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """The header and its wrapper compiled: plain C, so a C compiler is all it needs (not Python.h)."""
    cc = c_compiler()
    if cc is None:
        pytest.skip("no C compiler on this machine: no C path is built from the rules (the extensions are "
                    "optional), so every conversion runs the rules in Python")
    d = tmp_path_factory.mktemp("rules")
    (d / "type_rules.h").write_text(c_source(SOURCE))
    (d / "wrapper.c").write_text(_wrapper())
    subprocess.run([*cc, "-O2", "-Wall", "-Werror", "-Wno-unused-function", "-shared", "-fPIC",
                    "-o", str(d / "rules.so"), str(d / "wrapper.c")], check=True, capture_output=True)
    lib = ctypes.CDLL(str(d / "rules.so"))
    for rule in rules.RULES:
        fn = getattr(lib, f"call_{rule.__name__}")
        argtypes = []
        for kind in _params(rule):
            argtypes += [ctypes.c_char_p, ctypes.c_ssize_t] if kind == "bytes" else [ctypes.c_int64]
        fn.argtypes = [*argtypes, ctypes.POINTER(ctypes.c_int64)] + \
            ([ctypes.POINTER(ctypes.c_int64)] if _wide(rule) else [])
        fn.restype = ctypes.c_int64
    return lib


def _wide(rule) -> bool:
    return str(inspect.signature(rule).return_annotation) in ("wide", "wide | None")


def _call_c(lib, rule, args):
    c_args = []
    for kind, a in zip(_params(rule), args):
        c_args += [a, len(a)] if kind == "bytes" else [a]
    ok, hi = ctypes.c_int64(), ctypes.c_int64()
    wide_out = [ctypes.byref(hi)] if _wide(rule) else []
    value = getattr(lib, f"call_{rule.__name__}")(*c_args, ctypes.byref(ok), *wide_out)
    ret = str(inspect.signature(rule).return_annotation)
    if ret in ("wide", "wide | None"):
        return (hi.value << 64) + (value & ((1 << 64) - 1)) if ok.value else None
    if ret == "int | None":
        return value if ok.value else None
    return bool(value) if ret == "bool" else value


def test_the_c_check_runs_under_a_python_without_its_headers(tmp_path):
    """Under this Python with a prefix of its own that has its standard library and no headers
    (as where python3-dev is not installed), the check of the rules' C runs: it does not skip."""
    if c_compiler() is None:
        pytest.skip("no C compiler on this machine: the check of the rules' C cannot run anywhere here")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / stdlib.name).symlink_to(stdlib)
    env = {**os.environ, "PYTHONHOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    probe = "import sysconfig; from tests.native_helpers import can_build; print(sysconfig.get_paths()['include'], can_build())"
    assert subprocess.run([sys.executable, "-c", probe], env=env, cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.split() == [str(tmp_path / "include" / stdlib.name), "False"]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                          f"{Path(__file__).relative_to(ROOT)}::test_the_c_of_each_rule_is_the_rule[is_leap]"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert "1 passed" in run.stdout, run.stdout[-3000:]


def test_every_rule_has_arguments_to_check():
    assert sorted(_ARGS) == sorted(r.__name__ for r in rules.RULES)


@pytest.mark.parametrize("rule", rules.RULES, ids=lambda r: r.__name__)
def test_the_c_of_each_rule_is_the_rule(compiled, rule):
    spec = _ARGS[rule.__name__]

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(spec if isinstance(spec, st.SearchStrategy) else st.tuples(*spec))
    def check(args):
        assert _call_c(compiled, rule, args) == rule(*args), args
    check()


# =============================================================================== what the C refuses
@pytest.mark.parametrize("body, error", [
    ("def f(x: int) -> int:\n    return x ** 2\n", r"f, line 2: operator Pow"),
    ("def f(x: int) -> int:\n    while x:\n        x -= 1\n    return x\n", r"f, line 2: While"),
    ("def g(x: int) -> int | None:\n    return x\n\ndef f(x: int) -> int:\n    return g(x)\n",
     r"f, line 5: g\(\) may give None"),
    ("def g(x: int) -> int | None:\n    return x\n\ndef f(x: int) -> int | None:\n    y = g(x)\n    return y\n",
     r"f, line 5: `y = g\(...\)` is followed by `if y is None: return None`"),
    ("def f(x: int) -> int:\n    return z\n", r"f, line 2: unknown name 'z'"),
    ("def f(x: float) -> int:\n    return 1\n", r"f\(x\): annotation 'float'"),
    ("def f(s: bytes) -> int:\n    return s[1:2]\n", r"f, line 2: slices"),
    ("def g(x: int) -> wide | None:\n    return x\n\ndef f(x: int) -> int | None:\n    y = g(x)\n"
     "    if y is None:\n        return None\n    return 1\n", r"f, line 5: y and g\(\)'s value are not both wide"),
])
def test_what_c_does_not_take_is_refused_by_rule_and_line(body, error):
    names = re.findall(r"^def (\w+)", body, re.M)
    with pytest.raises(RuleError, match=error):
        c_source(body + f"\nRULES = ({', '.join(names)},)\n")


# =============================================================================== where C and Python would part
#: Rules of the subset that Python and C would run apart: a zero divisor, a shift by a negative
#: count or one of 64 and more, an index outside its tuple or bytes (Python raises or wraps, the
#: C reads 0 or -1), a loop whose body moves its bounds or variable, or whose variable is read
#: after it.
_APART = [
    ("def f(x: int) -> int:\n    return x // 0\n", r"f, line 2: divides by zero"),
    ("ZERO = 0\n\ndef f(x: int) -> int:\n    return x % ZERO\n", r"f, line 4: divides by zero"),
    ("def f(x: int, y: int) -> int:\n    return x // y\n", r"f, line 2: the divisor `y` is not proven non-zero"),
    ("def f(x: int, y: int) -> int | None:\n    if y < 0:\n        return None\n    return x % y\n",
     r"f, line 4: the divisor `y` is not proven non-zero \(it is within 0 to inf\)"),
    ("T = (1, 2, 3)\n\ndef f(x: int) -> int:\n    return T[3]\n",
     r"f, line 4: the index `3` of T is not proven within 0 to 2"),
    ("T = (1, 2, 3)\n\ndef f(x: int) -> int:\n    return T[x]\n", r"f, line 4: the index `x` of T"),
    ("T = (1, 2, 3)\n\ndef f(x: int) -> int:\n    return T[x - 1] if x <= 3 else 0\n",
     r"f, line 4: the index `x - 1` of T is not proven within 0 to 2 \(it is within -inf to 2\)"),
    ("def f(s: bytes) -> int:\n    return s[0]\n", r"f, line 2: the index `0` of s is not proven"),
    ("def f(s: bytes) -> int:\n    if len(s) < 2:\n        return 0\n    return s[-1]\n",
     r"f, line 4: the index `-1` of s"),
    ("def f(s: bytes) -> int:\n    n = len(s)\n    return s[n] if n > 0 else 0\n", r"f, line 3: the index `n` of s"),
    ("def f(s: bytes, n: int) -> int:\n    v = 0\n    for i in range(0, n):\n        v += s[i]\n    return v\n",
     r"f, line 4: the index `i` of s"),
    ("def f(s: bytes, a: int) -> int:\n    b = a + 2\n    if len(s) <= b:\n        return 0\n    return s[b]\n",
     r"f, line 5: the index `b` of s"),
    ("def f(x: int, n: int) -> int:\n    return x << n\n", r"f, line 2: the shift `n` is not proven within 0 to 63"),
    ("def f(x: int) -> int:\n    return x >> 64\n", r"f, line 2: the shift `64` is not proven within 0 to 63"),
    ("def f(x: int, y: int) -> int:\n    return x and y\n", r"f, line 2: `x` is not a boolean"),
    ("def f(x: int, y: int) -> bool:\n    z = x > 0 or y\n    return z == 1\n", r"f, line 2: `y` is not a boolean"),
    ("def f(n: int) -> int:\n    v = 0\n    for i in range(0, n):\n        n -= 1\n    return v\n",
     r"f, line 3: the loop's body assigns its bound n"),
    ("def f(n: int) -> int:\n    v = 0\n    for i in range(0, n):\n        i += 1\n    return v\n",
     r"f, line 3: the loop's body assigns its variable i"),
    ("def f(n: int) -> int:\n    v = 0\n    for i in range(0, n):\n        v += i\n    return i\n",
     r"f, line 5: i, a loop's variable, is used outside its loop"),
]

#: Their guarded forms, which both languages run alike: taken.
_GUARDED = [
    "def f(x: int, y: int) -> int | None:\n    if y < 1:\n        return None\n    return x // y\n",
    "def f(x: int) -> int:\n    return x // 7 + x % -3\n",
    "def f(x: int, y: int) -> bool:\n    if x and not y:\n        return x > 1 or y != 0\n    return False if x or y else True\n",
    "def f(x: int, n: int) -> int:\n    return x << 8 * n - 8 >> 3 if 1 <= n <= 4 else 0\n",
    "T = (1, 2, 3)\n\ndef f(x: int) -> int:\n    return T[x - 1] if 1 <= x <= 3 else 0\n",
    "T = (1, 2, 3)\n\ndef f(x: int) -> int:\n    return 10 // T[x % 3]\n",
    "def f(s: bytes, at: int) -> int:\n    if at < 0 or at >= len(s):\n        return -1\n    return s[at]\n",
    "def f(s: bytes) -> int:\n    n = len(s)\n    return s[n - 1] if n > 0 and s[0] == 45 else 0\n",
    "def f(s: bytes, start: int, stop: int) -> int:\n    v = 0\n    if start < 0 or stop > len(s):\n"
    "        return 0\n    for i in range(start, stop):\n        v = v * 10 + s[i]\n    return v\n",
    "def f(s: bytes, a: int) -> int:\n    if a < 0:\n        return 0\n    b = a + 2\n    if len(s) <= b:\n"
    "        return 0\n    return s[b]\n",
]


def _rules(body: str) -> str:
    names = re.findall(r"^def (\w+)", body, re.M)
    return body + f"\nRULES = ({', '.join(names)},)\n"


@pytest.mark.parametrize("body, error", _APART)
def test_what_python_and_c_would_run_apart_is_refused_by_rule_and_line(body, error):
    with pytest.raises(RuleError, match=error):
        c_source(_rules(body))


@pytest.mark.parametrize("body", _GUARDED)
def test_a_guard_in_the_rule_proves_it(body):
    assert "static inline" in c_source(_rules(body))
