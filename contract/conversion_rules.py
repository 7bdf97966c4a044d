"""The conversion rules of the calendar types and DECIMAL: written once, run in Python, compiled to C.

Each rule is a plain Python function over integers and bytes in a small subset of Python
(:mod:`contract.conversion_rules_c` says which, and refuses anything else by name and line).
The Python paths call these functions (through their caches: :mod:`producer.binlog.row_decoder`'s
``EpochSeconds``, :mod:`producer.events.select_encoder`'s ``EpochDays``,
:mod:`spark_jobs.sinks.copy_text`'s ``date_text``); ``setup.py`` writes ``contract/type_rules.h``
from them (:func:`contract.conversion_rules_c.c_source`) before it compiles the C paths, which
include it (``_binlog_images.c``'s DATETIME2 and packed DECIMAL, ``_select_rows.c``'s DATE,
DATETIME, DECIMAL and integer texts, ``_copy_text.c``'s date and TIME texts, which the sinks' TIME text
(:func:`spark_jobs.sinks.values.format_time_micros`) shares).  The DECIMAL rules also give the
binlog decoder's values (:func:`producer.binlog.row_decoder.decimal_code`).  Fixing a rule edits
it here; both languages follow at the next build, and a test keeps the header equal to these
functions.

A rule annotated ``-> int | None`` is *partial*: None is a value the fast paths refuse (the row
then takes the values' way); one annotated ``-> int`` or ``-> bool`` is total; ``wide`` marks a
value of up to 128 bits (C's ``__int128``: a DECIMAL's digits, a TIME's fields).  Every other integer stays
within a signed 64-bit range (C's ``int64_t``).  Where the two languages part ways (a zero
divisor, an index outside a tuple or a ``bytes`` argument, a loop's bounds), the compiler takes a
rule only once it has proven that the rule never goes there (:mod:`contract.conversion_rules_proof`):
a rule checks a ``bytes`` argument's length before it reads it, and an argument before it
divides by it or indexes with it.

Pure functions: no I/O, no imports.
"""

from __future__ import annotations

__all__ = [
    "RULES",
    "is_leap",
    "valid_date",
    "days_since_epoch",
    "date_days",
    "civil_date",
    "time_fields",
    "packed_date_days",
    "packed_time_seconds",
    "datetime2_fraction",
    "datetime2_units",
    "digits",
    "three_fields",
    "int_text",
    "decimal_group",
    "packed_decimal",
    "decimal_text",
    "date_text_prefix_days",
    "date_text_days",
    "datetime_text_units",
]

#: Days in each month of a common year (index 1 to 12).
DAYS_IN_MONTH = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
#: Days before each month of a common year (index 1 to 12).
DAYS_BEFORE_MONTH = (0, 0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334)
#: 10 ** n for n of 0 to 18.
POWERS_OF_TEN = (1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000, 10000000000,
                 100000000000, 1000000000000, 10000000000000, 100000000000000, 1000000000000000,
                 10000000000000000, 100000000000000000, 1000000000000000000)
#: Bytes of a group of n digits (0 to 9) of a packed DECIMAL (MySQL's binary form).
DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
#: The annotation of a value that may need more than 64 bits (C's ``__int128``): a DECIMAL's
#: unscaled value, of up to 38 digits in C (its callers check; Python's have no bound).
wide = int
#: Python's ``date(1970, 1, 1).toordinal()``.
EPOCH_ORDINAL = 719163
#: The days since 1970-01-01 of 0001-01-01 and of 9999-12-31 (Python's date range).
FIRST_DAY = -719162
LAST_DAY = 2932896


# =============================================================================== dates
def is_leap(y: int) -> bool:
    """Whether year ``y`` is a leap year of the proleptic Gregorian calendar."""
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def valid_date(y: int, m: int, d: int) -> bool:
    """Whether ``y-m-d`` is a date Python's ``datetime.date`` takes (years 1 to 9999)."""
    if y < 1 or y > 9999 or m < 1 or m > 12 or d < 1:
        return False
    if m == 2 and is_leap(y):
        return d <= 29
    return d <= DAYS_IN_MONTH[m]


def days_since_epoch(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a valid date (Python's ``date.toordinal() - 719163``; a month
    outside 1 to 12, of no valid date, has no days before it)."""
    py = y - 1
    before = DAYS_BEFORE_MONTH[m] if 1 <= m <= 12 else 0
    ordinal = py * 365 + py // 4 - py // 100 + py // 400 + before + d
    if m > 2 and is_leap(y):
        ordinal += 1
    return ordinal - EPOCH_ORDINAL


def date_days(y: int, m: int, d: int) -> int | None:
    """Days since 1970-01-01 of ``y-m-d``; None where it is not a valid date."""
    if not valid_date(y, m, d):
        return None
    return days_since_epoch(y, m, d)


def civil_date(days: int) -> int | None:
    """The date ``days`` after 1970-01-01 as ``year * 10000 + month * 100 + day``; None outside
    years 1 to 9999 (H. Hinnant's ``civil_from_days``)."""
    if days < FIRST_DAY or days > LAST_DAY:
        return None
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    if m <= 2:
        y += 1
    return y * 10000 + m * 100 + d


def time_fields(v: int, scale: int) -> wide:
    """A TIME of ``v`` units of ``scale`` microseconds (1, or 1000 for milliseconds) as
    ``hours * 10**10 + minutes * 10**8 + seconds * 10**6 + microseconds``, negative for a
    negative TIME (its text ``[-]H:MM:SS.ffffff``: the COPY encoders' and the sinks')."""
    a: wide = (0 - v if v < 0 else v) * scale
    fields: wide = a // 3600000000 * 10000000000 + a // 60000000 % 60 * 100000000 + a // 1000000 % 60 * 1000000 \
        + a % 1000000
    return 0 - fields if v < 0 else fields


# =============================================================================== binlog DATETIME2
def packed_date_days(ymd: int) -> int | None:
    """Days since 1970-01-01 of a DATETIME2's date bits (its packed value ``>> 17``:
    ``(year * 13 + month) << 5 | day``); None for a zero or invalid date."""
    year_month = ymd >> 5 & 0x1FFFF
    return date_days(year_month // 13, year_month % 13, ymd & 31)


def packed_time_seconds(hms: int) -> int | None:
    """Seconds of the day of a DATETIME2's time bits (its packed value ``& 0x1FFFF``: hour,
    minute and second in 5, 6 and 6 bits); None for hour 24 and up, minute or second 60 and up."""
    hour = hms >> 12 & 31
    minute = hms >> 6 & 63
    second = hms & 63
    if hour >= 24 or minute >= 60 or second >= 60:
        return None
    return hour * 3600 + minute * 60 + second


def datetime2_fraction(f: int, fsp: int, unit: int) -> int | None:
    """A DATETIME2's fraction of precision ``fsp`` (its ``(fsp + 1) // 2`` big-endian bytes read
    unsigned: 0 where ``fsp`` is 0) in ``unit`` microseconds (1 or 1000), a tenth dropped for an
    odd precision; None above its limit (a negative one has its sign bit set: above it too), or
    for a precision outside 0 to 6 or a unit below 1."""
    if fsp < 0 or fsp > 6 or unit < 1:
        return None
    scale = POWERS_OF_TEN[6 - fsp]
    tenth = fsp % 2
    limit = (999999 // scale) * (10 if tenth else 1) + (9 if tenth else 0)
    if f > limit:
        return None
    micro = f // 10 if tenth else f
    if scale % unit == 0:
        return micro * (scale // unit)
    return micro * scale // unit


def datetime2_units(d: int, f: int, fsp: int, unit: int) -> int | None:
    """A DATETIME2 (``d``: its first five bytes big-endian; ``f``: its fraction's bytes) in
    ``unit`` microseconds since 1970-01-01 00:00 of its wall clock; None for a zero or invalid
    date or time, or a fraction out of range (or a unit below 1)."""
    if unit < 1:
        return None
    days = packed_date_days(d >> 17)
    if days is None:
        return None
    seconds = packed_time_seconds(d & 0x1FFFF)
    if seconds is None:
        return None
    fraction = datetime2_fraction(f, fsp, unit)
    if fraction is None:
        return None
    return (days * 86400 + seconds) * (1000000 // unit) + fraction


# =============================================================================== SELECT texts
def digits(s: bytes, start: int, stop: int) -> int | None:
    """The number written in ASCII digits in ``s[start:stop]`` (at most 18 of them); None where
    one is not a digit or ``s`` is shorter."""
    if start < 0 or stop > len(s) or stop - start > 18:
        return None
    v = 0
    for i in range(start, stop):
        c = s[i]
        if c < 48 or c > 57:
            return None
        v = v * 10 + c - 48
    return v


def three_fields(s: bytes, at: int, width: int, sep: int) -> int | None:
    """``A<sep>BB<sep>CC`` at ``s[at:]`` (A of ``width`` digits, ``sep`` a byte) as
    ``A * 10000 + BB * 100 + CC``; None where ``s`` does not hold that there (or ``width`` is
    not at least 1)."""
    if at < 0 or width < 1:
        return None
    b = at + width
    if len(s) < b + 6 or s[b] != sep or s[b + 3] != sep:
        return None
    x = digits(s, at, b)
    if x is None:
        return None
    y = digits(s, b + 1, b + 3)
    if y is None:
        return None
    z = digits(s, b + 4, b + 6)
    if z is None:
        return None
    return x * 10000 + y * 100 + z


def date_text_prefix_days(s: bytes) -> int | None:
    """Days since 1970-01-01 of the ``YYYY-MM-DD`` that ``s`` starts with; None where it does not
    start with a valid date in that form."""
    ymd = three_fields(s, 0, 4, 45)
    if ymd is None:
        return None
    return date_days(ymd // 10000, ymd // 100 % 100, ymd % 100)


def date_text_days(s: bytes) -> int | None:
    """Days since 1970-01-01 of a DATE's text ``YYYY-MM-DD``; None where it is not a valid date
    in that form."""
    if len(s) != 10:
        return None
    return date_text_prefix_days(s)


def datetime_text_units(s: bytes, unit: int) -> int | None:
    """A DATETIME's text ``YYYY-MM-DD hh:mm:ss[.f{1,6}]`` in ``unit`` microseconds (1 or 1000)
    since 1970-01-01 00:00 of its wall clock; None where it is not one in that form (or ``unit``
    is below 1)."""
    n = len(s)
    if unit < 1 or (n != 19 and (n < 21 or n > 26)):
        return None
    days = date_text_prefix_days(s)
    if days is None:
        return None
    if s[10] != 32 or (n > 19 and s[19] != 46):
        return None
    hms = three_fields(s, 11, 2, 58)
    if hms is None:
        return None
    h = hms // 10000
    mi = hms // 100 % 100
    sec = hms % 100
    if h > 23 or mi > 59 or sec > 59:
        return None
    v = (days * 86400 + h * 3600 + mi * 60 + sec) * (1000000 // unit)
    if n > 19:
        fraction = digits(s, 20, n)
        if fraction is None:
            return None
        v += fraction * POWERS_OF_TEN[26 - n] // unit
    return v


# =============================================================================== integers
def int_text(s: bytes) -> int | None:
    """An integer's text as MySQL writes it (``[-]digits``, at most 19 of them) within a signed
    64-bit range; None otherwise (an UNSIGNED BIGINT above it, a sign, a space: the values' way)."""
    n = len(s)
    negative = 1 if n > 0 and s[0] == 45 else 0
    if n - negative < 1 or n - negative > 19:
        return None
    v: wide = 0
    for i in range(negative, n):
        c = s[i]
        if c < 48 or c > 57:
            return None
        v = v * 10 + c - 48
    if negative:
        v = 0 - v
    if v < 0 - 9223372036854775807 - 1 or v > 9223372036854775807:
        return None
    return v


# =============================================================================== DECIMAL
def decimal_group(s: bytes, at: int, n: int, count: int, flip: int, first: int) -> int | None:
    """The group of ``count`` digits in the ``n`` bytes at ``s[at:]`` of a packed DECIMAL, each
    byte XORed with ``flip`` (255 for a negative value), the sign bit dropped where it is the
    ``first``; None at or above ``10 ** count`` (a value beyond its precision: python-mysql-
    replication reads it as a string of its own) or where ``s`` is shorter (or ``n`` is outside
    1 to 4, a group's size, or ``count`` outside 0 to 18)."""
    stop = at + n
    if at < 0 or n < 1 or n > 4 or stop > len(s) or count < 0 or count > 18:
        return None
    v = 0
    for i in range(at, stop):
        v = v * 256 + (s[i] ^ flip)
    if first:
        v -= 128 << (8 * n - 8)
    if v >= POWERS_OF_TEN[count]:
        return None
    return v


def packed_decimal(s: bytes, at: int, precision: int, scale: int) -> wide | None:
    """The unscaled value (its digits, signed) of the ``DECIMAL(precision, scale)`` packed at
    ``s[at:]`` (a binlog row image's form); None where a group is beyond its digits or ``s`` is
    shorter.  In C, for a precision of at most 38 (its callers check)."""
    integral = precision - scale
    head_digits = integral % 9
    tail_digits = scale % 9
    head = DIG2BYTES[head_digits]
    tail = DIG2BYTES[tail_digits]
    full = integral // 9 + scale // 9
    if at < 0 or at >= len(s):
        return None
    flip = 0 if s[at] & 128 else 255  # negative: every byte inverted
    total: wide = 0
    pos = at
    if head > 0:
        g = decimal_group(s, pos, head, head_digits, flip, 1)
        if g is None:
            return None
        total = g
        pos += head
    for k in range(0, full):
        g = decimal_group(s, pos, 4, 9, flip, pos == at)
        if g is None:
            return None
        total = total * 1000000000 + g
        pos += 4
    if tail > 0:
        g = decimal_group(s, pos, tail, tail_digits, flip, pos == at)
        if g is None:
            return None
        total = total * POWERS_OF_TEN[tail_digits] + g
    return -total if flip else total


def decimal_text(s: bytes, scale: int) -> wide | None:
    """The unscaled value of a DECIMAL's text as MySQL writes it (``[-]digits``, then a point
    and ``scale`` digits where ``scale`` is not 0), of at most 38 digits; None where it is not
    one in that form."""
    n = len(s)
    negative = 1 if n > 0 and s[0] == 45 else 0
    point = n
    if scale > 0:
        point = n - scale - 1
        if point <= negative or s[point] != 46:
            return None
    elif n <= negative:
        return None
    if n - negative - (1 if scale > 0 else 0) > 38:
        return None
    total: wide = 0
    for i in range(negative, n):
        if i != point:
            c = s[i]
            if c < 48 or c > 57:
                return None
            total = total * 10 + c - 48
    return -total if negative else total


#: Every rule, in the order the C header defines them (a rule after those it calls).
RULES = (is_leap, valid_date, days_since_epoch, date_days, civil_date, time_fields, packed_date_days,
         packed_time_seconds, datetime2_fraction, datetime2_units, digits, three_fields, date_text_prefix_days,
         date_text_days, datetime_text_units, int_text, decimal_group, packed_decimal, decimal_text)
