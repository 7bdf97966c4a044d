"""The binlog reader the producer uses: the project's own client, or python-mysql-replication.

``CDC_BINLOG_CLIENT`` selects it: ``own`` (the default: :class:`producer.binlog.reader.BinlogReader`)
or ``library`` (:class:`producer.binlog.library_reader.LibraryBinlogReader`, the reference,
through the library's public API).  Both take the same arguments and give the same items.
"""

from __future__ import annotations

import os

from producer.binlog.library_reader import LibraryBinlogReader
from producer.binlog.reader import BinlogReader

#: The environment variable that selects the binlog client.
CLIENT_ENV = "CDC_BINLOG_CLIENT"
READERS = {"own": BinlogReader, "library": LibraryBinlogReader}


def reader_class() -> type[BinlogReader] | type[LibraryBinlogReader]:
    """The reader ``CDC_BINLOG_CLIENT`` selects (unset or empty: ``own``)."""
    name = os.environ.get(CLIENT_ENV, "").strip().lower() or "own"
    try:
        return READERS[name]
    except KeyError:
        raise ValueError(f"{CLIENT_ENV}={name!r}: the binlog client is 'own' or 'library'") from None


def open_reader(*args, **kwargs) -> BinlogReader | LibraryBinlogReader:
    """The selected reader (:func:`reader_class`), made with these arguments."""
    return reader_class()(*args, **kwargs)
