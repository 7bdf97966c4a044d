"""``cdc merge``: Kafka -> Spark Structured Streaming -> DBLog window dedup -> sinks.

The stream reads every table topic ``<prefix>.<db>.<table>`` (the ``cdc-kafka`` Python
source, or Spark's own ``kafka`` source with ``spark.kafka_source: jvm``).  Each
micro-batch (``foreachBatch``):

1. fixes, once, the range of the window markers topic ``<prefix>._markers`` it covers:
   from where the previous batch stopped to the topic's end looked up *now*, after the
   batch's table offsets were fixed.  The producer commits a marker no later than the
   records after it, so every marker below any record of the batch is in that range.
   The range is written down before use (``merge-state/<batch>.plan.json``) so a
   replayed batch reads the same markers;
2. runs :func:`spark_jobs.task.partition_merge.merge_partition` per table partition on the
   executors: the batch's Kafka ranges, planned from Spark's offset log as the source plans
   them, in at most one task per executor core, each task reading its ranges itself
   (:func:`spark_jobs.task.partition_merge.range_function`; with ``spark.kafka_source: jvm``,
   ``mapInArrow`` over the batch's DataFrame); no shuffle: decode, the DBLog rule, clean
   changelog, sinks, dead letters;
3. applies the table markers once every partition of their table has been read past the
   point the marker was seen: each table sink deletes the table's rows below the marker's
   position: for ``DELETE_MISSING`` (snapshots taken with ``delete-missing``) the rows the
   snapshot did not refresh (deleted at the source while their changes were lost), for
   ``TRUNCATE`` every row written before the statement;
4. stores the partitions' new states (``merge-state/<batch>.json``: window buffers and
   pending markers, bounded by the open windows; each clean partition's end offset and last
   position as the batch left them, :mod:`spark_jobs.clean_changelog`) and logs the
   batch's figures (input rows, rows/s, chunk rows dropped by the DBLog rule, copies,
   latency p50/p99 from the source commit to the sink write, records lost in Kafka), also
   written to
   ``<state_dir>/merge-status.json`` for ``cdc status``.

Lost Kafka history (a topic deleted or recreated, records removed before they were read,
a checkpoint past the end of the log): with ``spark.fail_on_data_loss`` (default) the job
stops with :class:`MergeDataLoss`, naming each partition, its checkpoint offset, the
broker's offsets, how far each sink got, and what to do.  It checks before it starts a
query and after a query failed; the source stops the query itself when it finds loss while
running.  With ``fail_on_data_loss: false`` it carries on from what Kafka holds and counts
what was lost (batch log WARNING, ``merge-status.json``, metrics).

A replayed batch (after a crash, Spark runs the last uncommitted batch again with the
same offsets) starts from the state stored for the batch before, reads the same markers
and so decides the same; the sinks never move a row backwards and the clean changelog
skips what it already holds.  The query restarts after a failure (a lost database,
Kafka) with backoff; a bounded run (``available_now``) stops instead when one batch keeps
failing (:mod:`spark_jobs.query_restarts`).  ``cdc merge`` stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from common import logs
from common.config import CapturedSource, CDCConfig, load_config
from common.errors import CDCError, KafkaAuthError
from common.kafka.clients import check_connection
from common.kafka.security import export_secret_references
from common.metrics_http import process_registry, serve_metrics
from contract.schema_store import SchemaStore
from contract.topics import dlq_topic
from spark_jobs import driver_memory  # noqa: F401 - pyarrow's pool chosen before anything makes it
from spark_jobs import sections  # noqa: F401 - every section of the configuration registered before it loads
from spark_jobs.commit.batch_commit import owner_of, query_app_id
from spark_jobs.query_restarts import QueryRestarts
from spark_jobs.report.batch_report import BatchReport, KafkaLag, MergeCollector
from spark_jobs.input.data_loss import DataLoss
from spark_jobs.planning.data_loss_guard import DataLossGuard
from spark_jobs.input.driver_kafka import DriverKafka
from spark_jobs.input.kafka_offsets import log_end_from_json, lost_from_json
from spark_jobs.commit.lake_committer import LakeCommitters, lake_committers
from spark_jobs.planning.marker_planner import MarkerPlanner, batch_inputs
from spark_jobs.commit.merge_state import MergeStateStore
from spark_jobs.input.available_now import run_available_now
from spark_jobs.planning.merge_tasks import MergeTasks
from spark_jobs.input.offset_log import batch_end_offsets
from spark_jobs.task.decide import merge_markers
from spark_jobs.task.settings import MergeSettings, sinks_of
from spark_jobs.task.partition_merge import warm_worker
from spark_jobs.planning.partition_turns import batch_turn_keys, key_partition_counts
from spark_jobs.planning.route_targets import RouteTargets
from spark_jobs.report.running_batch import RunningBatch, progress_figures
from spark_jobs.planning.schema_guard import SchemaGuard
from spark_jobs.sharding.routes import Router
from spark_jobs.sinks.configured import lake_conf, spark_lakes
from spark_jobs.sinks.lake_spark import check_connectors
from spark_jobs.commit.table_markers import TableMarkers, debezium_truncates
from spark_jobs.planning.table_topics import TableTopics
from spark_jobs.maintenance.tombstone_purger import TombstonePurger

log = logging.getLogger(__name__)


def warm_workers(spark, name: str) -> threading.Thread:
    """Start Spark's Python workers while the merge query starts: a job of one empty task per
    executor core (:func:`~spark_jobs.task.partition_merge.warm_worker`), run on a thread of its
    own (``name`` in its name) so that the query's start does not wait for it.

    Otherwise the first micro-batch's tasks wait for them: Spark starts its Python daemon,
    which forks the workers, and each worker imports PySpark and the merge's modules before
    it runs its task (about 0.6 s of the first micro-batch in ``cdc bench merge``, while the
    query's start left a core idle: docs/merge-performance.md).  The workers stay for the
    tasks that follow (``spark.python.worker.reuse``).  A failure here loses only the warm
    start: the first batch starts the workers as before."""
    sc = spark.sparkContext

    def run() -> None:
        try:
            n = max(1, sc.defaultParallelism)
            sc.parallelize(range(n), n).mapPartitions(warm_worker).collect()
        except Exception as exc:  # noqa: BLE001 - only the warm start is lost
            log.debug("the Python workers' warm start failed: %s", exc)

    t = threading.Thread(target=run, name=f"cdc-merge-warm-{name}", daemon=True)
    t.start()
    return t


class MergeJob:
    """The merge job of one source (``source``: an entry of ``cfg.captured_sources()``,
    default the first): its table topics, markers and schemas under the source's topic
    prefix.  With ``source:`` alone that is today's job (checkpoint ``spark.checkpoint_dir``,
    ``merge-status.json``); with ``sources`` each source's job keeps its checkpoint and
    status under its name (:func:`run_merge` runs one per source, one query each).

    The job orchestrates its named parts, each in its own module: the table topics
    (:class:`~spark_jobs.planning.table_topics.TableTopics`), the state store
    (:class:`~spark_jobs.commit.merge_state.MergeStateStore`), the data-loss guard
    (:class:`~spark_jobs.planning.data_loss_guard.DataLossGuard`), the marker planner
    (:class:`~spark_jobs.planning.marker_planner.MarkerPlanner`), the schema guard
    (:class:`~spark_jobs.planning.schema_guard.SchemaGuard`), the route targets
    (:class:`~spark_jobs.planning.route_targets.RouteTargets`), the table markers
    (:class:`~spark_jobs.commit.table_markers.TableMarkers`), the tombstone purger
    (:class:`~spark_jobs.maintenance.tombstone_purger.TombstonePurger`) and the batch report
    (:class:`~spark_jobs.report.batch_report.BatchReport`); it runs the query and its retry loop."""

    def __init__(self, cfg: CDCConfig, source: CapturedSource | None = None) -> None:
        cfg = cfg.for_part("merge")  # (its own Kafka login, when it has one)
        self.cfg = cfg
        k = cfg.kafka
        self.source = source or cfg.captured_sources()[0]
        self.prefix = self.source.topic_prefix
        self.source_name = self.source.name
        self.client = k.client_settings()
        # Kafka secrets reach the cdc-kafka source by reference (${env:} / ${file:}), never in
        # its options: put them where the Spark processes started after this find them.
        export_secret_references(k.security)
        self.kafka = DriverKafka(k, self.client)
        self.router = Router.from_config(cfg)
        self.settings = MergeSettings(
            bootstrap=k.bootstrap_servers, prefix=self.prefix, client=self.client,
            registry_url=k.schema_registry_url or None, registry_client=dict(k.schema_registry_client),
            changelog=cfg.sinks.changelog.enabled, sinks=cfg.sinks,
            dlq_topic=dlq_topic(self.prefix), source_name=self.source_name, routes=list(cfg.routes),
            clean_prefix=k.topic_prefix, debezium=k.input == "debezium")
        several = bool(cfg.sources)
        self.checkpoint = Path(cfg.spark.checkpoint_dir) / (self.source_name if several else "")
        self.owner = owner_of(k.topic_prefix)
        self.query_dir = self.checkpoint / "query"
        self.fail_on_data_loss = cfg.spark.fail_on_data_loss
        self.store = MergeStateStore(self.checkpoint / "merge-state")
        self.schemas = SchemaStore(k.bootstrap_servers, self.prefix, self.client or None)
        # every source's schemas (a route's target is the union of every source's shards)
        self._stores = {c.topic_prefix: (c.name, self.schemas if c.topic_prefix == self.prefix else
                                         SchemaStore(k.bootstrap_servers, c.topic_prefix, self.client or None))
                        for c in cfg.captured_sources()}
        clean_schemas = self._stores.get(k.topic_prefix, (None, None))[1] or \
            SchemaStore(k.bootstrap_servers, k.topic_prefix, self.client or None)
        self.tasks = MergeTasks(cfg, self.prefix, self.client, self.query_dir, self.router,
                                [p for p in self._stores if p != self.prefix])
        self.topics = TableTopics(cfg, self.kafka, self.prefix, self.source_name, self.router, self.settings)
        self.guard = DataLossGuard(self.kafka, self.prefix, self.query_dir, self.store, self.settings,
                                   self.fail_on_data_loss)
        self.planner = MarkerPlanner(self.kafka, self.prefix, self.query_dir, self.store, self.guard,
                                     self.settings.debezium)
        self.schema_guard = SchemaGuard(cfg, self.kafka, self.prefix, self.schemas, self.topics)
        self.routes = RouteTargets(cfg, self.kafka, self.prefix, self.router, self._stores, clean_schemas,
                                   self.topics, self.settings.changelog, self.query_dir)
        self.table_markers = TableMarkers(cfg, self.prefix, self.source_name, self.query_dir, self.router,
                                          self.settings)
        self.report = BatchReport(Path(cfg.state_dir) / (f"merge-status-{self.source_name}.json" if several
                                                         else "merge-status.json"))
        self.report.kafka_lag = KafkaLag(self.kafka.end_offsets)  # (the metrics' lag per partition)
        # Tombstones below what no replay can reach any more go (Debezium's input has no
        # stored resume point to tell that; without table sinks there are none).
        self.purger = TombstonePurger(
            self.kafka, self.prefix, self.source_name, self.query_dir, self.router, self.settings,
            0.0 if self.settings.debezium or not sinks_of(self.settings) else cfg.sinks.tombstone_purge_s)
        self.tombstone_purge = self.purger.purge
        self._stop = threading.Event()
        self.query = None
        self.running = RunningBatch(self.report)
        #: The lake tables' committers, shared by every source's job of the process (one per table).
        self.lakes: LakeCommitters = lake_committers(sinks_of(self.settings), cfg.sinks, self.owner,
                                                     Path(cfg.state_dir))
        #: The jobs whose figures this one's metrics endpoint serves (:func:`run_jobs`: every source's).
        self.peers: list[MergeJob] = [self]
        self.first_batch_started: float | None = None  # time.monotonic() of the first batch's start
        self.last_batch_ended: float | None = None  # ... and of the last batch's end
        self.lakes_committed: float | None = None  # ... and of the lakes' last commit, when the job stopped

    # -- the figures (the batch report's) ------------------------------------------------------
    @property
    def totals(self) -> dict[str, int]:
        return self.report.totals

    @property
    def phase_totals(self) -> dict[str, float]:
        return self.report.phase_totals

    @property
    def batches(self) -> int:
        return self.report.batches

    @property
    def held(self) -> int:
        return self.report.held

    @property
    def held_peak(self) -> int:
        return self.report.held_peak

    @property
    def status_path(self) -> Path:
        return self.report.status_path

    def prometheus(self) -> str:
        """The figures of this job and of the other sources' jobs that run beside it
        (:func:`run_jobs`; each sample labelled with its source then) in Prometheus text format."""
        return generate_latest(job_metrics(self, process=False)).decode()

    # -- the checks before a query starts (and after it failed) -----------------------------------
    def stop_on_data_loss(self) -> None:
        """:meth:`DataLossGuard.stop_on_data_loss`: lost Kafka history stops the job."""
        self.guard.stop_on_data_loss()

    def stop_on_schema_change(self) -> None:
        """:meth:`SchemaGuard.stop_on_schema_change`: a refused schema change stops the job."""
        self.schema_guard.stop_on_schema_change()

    def check_routes(self) -> None:
        """:meth:`RouteTargets.check_routes`: routes the job cannot apply stop it."""
        self.routes.check_routes()

    # -- one micro-batch ------------------------------------------------------------------------
    def process_batch(self, df, batch_id: int) -> None:
        t0, wall0 = time.monotonic(), time.time()
        if self.first_batch_started is None:
            self.first_batch_started = t0
        prev = self.store.state_before(batch_id)
        partitions = self.topics.ensure()  # after the batch's offsets were fixed
        plan, markers = self.planner.plan(batch_id, prev, partitions)
        schemas_end, epoch = int(plan.get("schemas_end") or 0), int(prev.get("sink_epoch") or 0)
        self.schema_guard.check(partitions, schemas_end)
        settings = self.settings
        if self.routes.active:
            settings = dataclasses.replace(settings, targets=self.routes.targets(partitions, schemas_end))
        counts, seen_counts, changed = key_partition_counts(partitions, prev.get("partition_counts") or {},
                                                            prev.get("partition_counts_changed") or [])
        turns = batch_turn_keys(self.prefix, self.schemas, counts, schemas_end, debezium=self.settings.debezium,
                                several_sources=len(self._stores) > 1)
        app = self._app_id()
        settings = dataclasses.replace(settings, batch_id=batch_id, app_id=app, owner=self.owner, key_partitions=turns)
        states = prev.get("partitions", {})
        inputs, orphans = batch_inputs(self.prefix, states, prev.get("orphan_markers", {}), partitions, markers)
        t_tasks = time.monotonic()
        ranges = self.tasks.range_spans(batch_id)
        self.running.starts(batch_id, t0, ranges)
        ok = False
        try:
            rows = self.tasks.run(df, batch_id, inputs, schemas_end, epoch, settings)
            ok = True
        finally:
            self.running.ends(ok)
        t_finish = time.monotonic()
        new_states, stats = new_partition_states(states, inputs, rows)
        committed = self.lakes.hand_over(stats, batch_id, app)  # (staged for the lake committers; inline: committed)
        t_committed = time.monotonic()
        if committed:
            stats.append(committed)
        waiting, deleted, moved = self.table_markers.apply(
            debezium_truncates(stats) + prev.get("delete_missing", []) + plan["delete_missing"], batch_id)
        self.store.save_state(batch_id, {"markers_next": plan["markers_end"], "partitions": new_states,
                                         "orphan_markers": orphans, "markers_topic_id": plan.get("markers_topic_id"),
                                         "delete_missing": waiting, "sink_epoch": epoch + moved,
                                         "partition_counts": seen_counts, "partition_counts_changed": changed})
        self.purger.after_batch(partitions)
        ends = batch_end_offsets(self.query_dir, batch_id)
        end = ends[0] if ends and isinstance(ends[0], dict) else None
        lost = [DataLoss.from_json(x) for x in plan.get("lost", [])] + lost_from_json(end)
        log_ends = {f"{t}[{p}]": o for (t, p), o in log_end_from_json(end).items()} \
            if self.cfg.spark.kafka_source != "jvm" else {}  # (Spark's own reports them in its progress)
        t_end = self.last_batch_ended = time.monotonic()
        phases = {"plan_s": t_tasks - t0, "tasks_s": t_finish - t_tasks, "finish_s": t_end - t_finish,
                  "lake_commit_s": t_committed - t_finish,  # (the hand-over; inline committers: their commits)
                  **{f"lake_commit_{name}_s": v for name, v in (committed.get("commit_s") or {}).items()}}
        self._report(batch_id, stats, len(markers), t_end - t0, lost=lost, deleted_missing=deleted, phases=phases,
                     ranges=ranges, states=new_states, log_ends=log_ends, started_at=wall0)

    def _report(self, batch_id: int, stats: list[dict], markers: int, seconds: float, *,
                lost: list[DataLoss] = (), deleted_missing: int = 0, phases: dict | None = None,
                ranges: dict | None = None, states: dict | None = None, log_ends: dict | None = None,
                started_at: float | None = None) -> None:
        """The batch's figures: :meth:`BatchReport.report` (the logs' ends: ``log_ends``, else
        the query's last progress report's)."""
        latest, spark_ms = progress_figures(self.query)
        latest = log_ends or latest
        self.report.report(batch_id, stats, markers, seconds, lost=lost, deleted_missing=deleted_missing,
                           phases=phases, latest=latest, spark_ms=spark_ms, ranges=ranges, states=states,
                           started_at=started_at)

    def _app_id(self) -> str:
        """The batch sinks' application id (:func:`~spark_jobs.commit.batch_commit.query_app_id`);
        empty without a batch sink."""
        if not any(sink.KIND == "batch" for _, sink in sinks_of(self.settings)):
            return ""
        return query_app_id(self.query_dir, self.owner, self.source_name)

    def close(self) -> None:
        """Let go of the job's Kafka admin client, and of the clients its batches merged in
        this process kept (all made again if the job runs again)."""
        self.kafka.close()
        self.tasks.close()

    # -- running -----------------------------------------------------------------------------
    def stop(self, wait_s: float = 60.0) -> None:
        """Stop after the running micro-batch (if any) has finished: interrupting a batch
        is safe (it is run again on restart) but noisy."""
        self._stop.set()
        q = self.query
        if q is None:
            return
        deadline = time.monotonic() + wait_s
        try:
            while q.isActive and q.status.get("isTriggerActive") and time.monotonic() < deadline:
                time.sleep(0.1)
            q.stop()
        except Exception:  # noqa: BLE001 - stopping a query that already failed
            pass

    def _started(self, writer):
        self.query = writer.start()
        self.report.query_running, self.report.not_running = True, ""
        return self.query

    def run(self, *, available_now: bool = False, max_restarts: int | None = None) -> int:
        """Run until stopped; ``available_now``: process what is in Kafka now, then return."""
        from spark_jobs.spark_session import build_session
        check_connection(self.cfg.kafka)  # a refused TLS handshake or SASL login stops here, named
        if self.fail_on_data_loss:
            self.stop_on_data_loss()
        self.stop_on_schema_change()
        self.check_routes()
        spark = build_session(self.cfg.spark.master, app_name=f"cdc-merge-{self.prefix}",
                              kafka_source=self.cfg.spark.kafka_source, ui_port=self.cfg.spark.ui_port,
                              conf=lake_conf(self.cfg.sinks))
        if spark_lakes(self.cfg.sinks):
            check_connectors(spark)  # (a JVM without the connectors' jars: stop here, named)
        warm_workers(spark, self.prefix)
        self.lakes.start()  # (the staged batches a crash left are committed first)
        first = self.source_name == self.cfg.captured_sources()[0].name  # one metrics port: the first source's job serves all
        stall_s = self.cfg.spark.health_stall_s
        server = serve_metrics(self.cfg.spark.metrics_port if first else None, job_metrics(self),
                               health=lambda: jobs_alive(self.peers, stall_s), ready=lambda: queries_running(self.peers))
        self.running.watch(f"cdc-merge-watch-{self.prefix}")
        restarts = QueryRestarts(bounded=available_now, max_restarts=max_restarts)
        try:
            while not self._stop.is_set():
                self.topics.ensure()
                writer = (self.tasks.reader(spark, idle_wait=not available_now).writeStream
                          .foreachBatch(self.process_batch)
                          .option("checkpointLocation", str(self.checkpoint / "query")))
                try:
                    if available_now and self.cfg.spark.kafka_source == "jvm":  # (admission control: Spark's own)
                        self._started(writer.trigger(availableNow=True)).awaitTermination()
                        return 0
                    if available_now:  # (spark_jobs.input.available_now: Spark 4.1's trigger would stop early)
                        run_available_now(lambda every: self._started(writer.trigger(processingTime=every)),
                                          self.tasks.source_options(), self.checkpoint / "query")
                        return 0
                    self._started(writer.trigger(processingTime=f"{self.cfg.spark.trigger_interval_s} seconds"))
                    self.query.awaitTermination()
                    return 0
                except Exception as exc:  # noqa: BLE001 - a failed batch: restart from the checkpoint
                    self.report.query_running = False
                    self.report.not_running = f"the query failed ({str(exc).splitlines()[0][:300]}); restarting"
                    if self._stop.is_set():
                        return 0
                    stop_if_refused(exc, self.cfg)  # the ACLs: a restart cannot help
                    if self.fail_on_data_loss:
                        self.stop_on_data_loss()  # lost Kafka history stops the job: a restart cannot help
                    self.stop_on_schema_change()  # so does a schema change the configuration refuses
                    self.check_routes()  # and a route whose tables no longer merge (a conflicting DDL)
                    self.running.restarted(str(exc))
                    delay = restarts.after_failure(exc, self.report.batches)  # (or raises: a bounded run's end)
                    log.error("the merge query failed (%s); restarting from the checkpoint in %.0fs",
                              str(exc).splitlines()[0][:500], delay)
                    self._stop.wait(delay)
            return 0
        finally:
            self.query = None
            self.report.query_running, self.report.not_running = False, "stopped"
            self.running.stop()
            if self.lakes.stop():  # (with the last job of the process: what is staged committed first)
                self.lakes_committed = time.monotonic()
            # (Spark's gateway keeps the batch function, and so the job, for as long as its JVM
            # runs: the admin client goes now, not when the broker may have stopped)
            self.close()
            if server is not None:
                server.shutdown()
                server.server_close()


def new_partition_states(states: dict, inputs: dict, rows: list[dict]) -> tuple[dict, list[dict]]:
    """The partitions' states after the batch (a task's ``state`` row, or for a partition
    without records its markers kept waiting) and the tasks' ``stats``."""
    new_states = dict(states)
    for key, (state, new) in inputs.items():  # partitions without records: their markers wait
        if new:
            st = dict(state or {})
            st["pending"] = merge_markers(st.get("pending", []), new)
            new_states[key] = st
    stats = []
    for r in rows:
        if r["kind"] == "state":
            new_states[f"{r['topic']}|{r['partition']}"] = json.loads(r["payload"])
        else:
            stats.append(json.loads(r["payload"]))
    return new_states, stats


def stop_if_refused(exc: Exception, cfg: CDCConfig) -> None:
    """A query that failed because Kafka refused the job's login an access (its ACLs)
    raises :class:`KafkaAuthError` naming the user: a restart cannot help."""
    refused = re.search(r"Kafka refused [^\n]*", str(exc))
    if refused or "AUTHORIZATION_FAILED" in str(exc):
        user = cfg.kafka.security.sasl_username or "(the client's principal)"
        raise KafkaAuthError(
            f"{refused.group(0) if refused else str(exc).splitlines()[0][:300]} (user {user!r}; "
            "the merge job logs in with spark.kafka_security, else kafka.security)") from None


def job_metrics(job: MergeJob, *, process: bool = True) -> CollectorRegistry:
    """The registry the job's metrics port serves: the figures of the job and of its peers
    (:class:`~spark_jobs.report.batch_report.MergeCollector`), and with ``process`` the driver
    process's own (:func:`common.metrics_http.process_registry`)."""
    registry = process_registry() if process else CollectorRegistry()
    registry.register(MergeCollector(lambda: [(j.source_name, j.report) for j in job.peers], job.lakes))
    return registry


def jobs_alive(jobs: list[MergeJob], stall_s: float) -> tuple[bool, str]:
    """``/healthz``: no job's batch has run longer than ``stall_s`` (``spark.health_stall_s``)."""
    for job in jobs:
        running = job.running.current
        if running is not None and time.monotonic() - running[1] > stall_s:
            return False, (f"batch {running[0]} of source {job.source_name} has run for "
                           f"{time.monotonic() - running[1]:.0f}s (spark.health_stall_s: {stall_s:g})")
    return True, "ok"


def queries_running(jobs: list[MergeJob]) -> tuple[bool, str]:
    """``/readyz``: every job's query runs."""
    for job in jobs:
        if not job.report.query_running:
            return False, f"the merge query of source {job.source_name} is not running: " + \
                (job.report.not_running or "not started yet")
    return True, "ok"


def run_jobs(jobs: list[MergeJob], *, available_now: bool = False, max_restarts: int | None = None) -> int:
    """Run the jobs of several sources side by side (a query each, one Spark session);
    when one stops with an error the others are stopped and the error raised."""
    if len(jobs) == 1:
        return jobs[0].run(available_now=available_now, max_restarts=max_restarts)
    for job in jobs:
        job.peers = list(jobs)  # the first source's job serves every job's figures
    from spark_jobs.spark_session import build_session
    build_session(jobs[0].cfg.spark.master, app_name="cdc-merge",  # one session, made before the threads
                  kafka_source=jobs[0].cfg.spark.kafka_source, ui_port=jobs[0].cfg.spark.ui_port,
                  conf=lake_conf(jobs[0].cfg.sinks))
    results: dict[int, Any] = {}
    done = threading.Event()

    def run(i: int, job: MergeJob) -> None:
        try:
            results[i] = job.run(available_now=available_now, max_restarts=max_restarts)
        except BaseException as exc:  # noqa: BLE001 - raised by the caller's thread
            results[i] = exc
            done.set()
    threads = [threading.Thread(target=run, args=(i, job), daemon=True, name=f"merge-{job.source_name}")
               for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        if done.wait(0.5):
            for job in jobs:
                job.stop()
            break
    for t in threads:
        t.join()
    for i in range(len(jobs)):
        if isinstance(results.get(i), BaseException):
            raise results[i]
    return max((r for r in results.values() if isinstance(r, int)), default=0)


def run_merge(cfg: CDCConfig, *, available_now: bool = False) -> int:
    """The merge job of every source (``CDCConfig.captured_sources()``): with ``source:``
    alone, one job exactly as before."""
    jobs = [MergeJob(cfg, source) for source in cfg.captured_sources()]

    def on_signal(signum, frame):  # noqa: ARG001
        log.info("stopping the merge job (signal %d)", signum)
        for job in jobs:
            threading.Thread(target=job.stop, daemon=True).start()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)
    return run_jobs(jobs, available_now=available_now)


def main() -> int:
    """``spark-submit spark_jobs/merge_job.py`` / ``python -m spark_jobs.merge_job``: the
    configuration from ``CDC_CONFIG`` (default ./cdc.yaml) and ``CDC__*`` variables."""
    logs.configure()
    try:
        return run_merge(load_config(os.environ.get("CDC_CONFIG", "cdc.yaml")))
    except CDCError as exc:
        log.error("%s", exc)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
