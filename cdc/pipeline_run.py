"""The pipeline of one run as processes: ``cdc produce`` and ``cdc merge`` started, killed
and stopped as a user would (the chaos run, the soak), with a configuration of the run's
own (topics, producer name, database, checkpoint and state directory)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from cdc.errors import CommandError
from common.config import CDCConfig, write_config

ROOT = Path(__file__).resolve().parents[1]


def run_config(cfg: CDCConfig, run: str, work_dir: Path, *, partitions: int) -> CDCConfig:
    """``cfg`` for one run named ``run``: topics and producer named after it, only its
    database (``run`` too) captured, ``partitions`` per table topic, the merge job on
    ``local[2]`` with its checkpoint, the state directory and the lake under ``work_dir``."""
    cfg = cfg.model_copy(deep=True)
    cfg.kafka.topic_prefix = cfg.producer.name = run
    cfg.kafka.partitions = partitions
    cfg.source.include_databases = [run]
    cfg.spark.master = "local[2]"
    cfg.spark.checkpoint_dir = str(work_dir / "checkpoints")
    cfg.state_dir = str(work_dir / "state")
    lake_of_run(cfg, work_dir, run)
    return cfg


def lake_of_run(cfg: CDCConfig, run_dir: Path, run: str) -> None:
    """The lake sinks of one run on a shared stack: its own Delta directory, warehouse and
    Iceberg catalog name (lake tables belong to one pipeline: docs/lake.md)."""
    if cfg.sinks.delta.enabled:
        cfg.sinks.delta.path = str(run_dir / "lake" / "delta")
    if cfg.sinks.iceberg.enabled:
        cfg.sinks.iceberg.warehouse = str(run_dir / "lake" / "iceberg")
        cfg.sinks.iceberg.catalog_name = run


@dataclass
class CdcProcess:
    """A ``cdc`` subcommand as a process in its own session (SIGKILL takes its children)."""

    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen | None = None
    starts: int = 0

    def start(self) -> None:
        """Start the process; one that still runs is an error (two producers of one name fence
        each other, two merge jobs of one checkpoint race: a caller meant to stop it first)."""
        if self.alive():
            raise CommandError(f"the {self.name} (pid {self.proc.pid}) still runs: stop or kill it before starting it "
                               "again")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                         env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
        self.starts += 1

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 120) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def pipeline_processes(cfg: CDCConfig, work_dir: Path, name: str) -> tuple[CdcProcess, CdcProcess]:
    """The run's producer and merge job (not started), with ``cfg`` written to
    ``work_dir/<name>.yaml`` and their logs beside it."""
    path = work_dir / f"{name}.yaml"
    write_config(cfg, path)
    cdc = [sys.executable, "-m", "cdc.cli", "-c", str(path)]
    return (CdcProcess("producer", [*cdc, "produce"], work_dir / "producer.log"),
            CdcProcess("merge job", [*cdc, "merge"], work_dir / "merge.log"))
