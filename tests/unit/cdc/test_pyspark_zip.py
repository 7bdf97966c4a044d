"""cdc.pyspark_zip: the installed PySpark's zip set aside and restored, idempotently."""

from __future__ import annotations

from cdc.pyspark_zip import main, restore, set_aside


def test_set_aside_and_restore_are_idempotent(tmp_path, capsys):
    z = tmp_path / "pyspark.zip"
    z.write_bytes(b"PK\x05\x06" + bytes(18))
    assert "moved to pyspark.zip.orig" in set_aside(z)
    assert not z.exists() and (tmp_path / "pyspark.zip.orig").exists()
    assert "already set aside" in set_aside(z)
    assert restore(z).endswith("restored") and z.read_bytes().startswith(b"PK")
    assert "nothing to restore" in restore(z)
    assert main([str(tmp_path / "absent.zip")]) == 0
    assert "no such file" in capsys.readouterr().out
