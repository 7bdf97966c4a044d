"""Spark's streaming checkpoint of a session from ``build_session`` is written through
Hadoop's ``FileSystem`` API (``CHECKPOINT_FILE_MANAGER``): the ``FileContext`` API Spark
takes by default spawns a ``readlink`` process per path it looks at on a local disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.spark_session import CHECKPOINT_FILE_MANAGER, build_session


def test_a_local_checkpoint_is_written_through_the_file_system_api_atomically(tmp_path: Path):
    session = build_session(master="local[1]", app_name="test-checkpoint-file-manager")
    jvm = session._jvm
    hadoop_conf = session._jsparkSession.sessionState().newHadoopConf()
    where = jvm.org.apache.hadoop.fs.Path(str(tmp_path / "offsets"))
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(
        where, hadoop_conf)
    assert manager.getClass().getName() == CHECKPOINT_FILE_MANAGER[1]

    # what the offset log does: a new file made whole by a rename, never over an existing one
    manager.mkdirs(where)
    target = jvm.org.apache.hadoop.fs.Path(str(tmp_path / "offsets" / "0"))
    out = manager.createAtomic(target, False)
    out.write(bytearray(b"v1\n{}\n"))
    assert not (tmp_path / "offsets" / "0").exists()  # (written under a temporary name first)
    out.close()
    assert (tmp_path / "offsets" / "0").read_bytes() == b"v1\n{}\n"
    again = manager.createAtomic(target, False)
    again.write(bytearray(b"v1\nother\n"))
    with pytest.raises(Exception, match="FileAlreadyExists|already exists"):  # (py4j's error carries Hadoop's)
        again.close()
    assert (tmp_path / "offsets" / "0").read_bytes() == b"v1\n{}\n"
