"""The package's compiled parts (everything else is in pyproject.toml): the native Avro reader of
contract/codecs/avro_decoder.py (its reads shared, in avro_read.h, with the PostgreSQL sink's COPY
lines of spark_jobs/sinks/copy_text.py and the merge task's change scan of
spark_jobs/task/decide.py), the Avro-to-JSON transcoder of connect_json.py, Kafka's default
partitioner of common/kafka/partitioner.py, the binlog image and SELECT row encoders of
producer/events/image_encoder.py and select_encoder.py, and the producer's own Kafka client of
producer/native_producer.py (built against librdkafka's header, /usr/include/librdkafka/rdkafka.h
from Debian's librdkafka-dev, which `make` installs: scripts/ensure-system-deps.sh).  Optional:
where no C compiler or header is at hand the build goes on without them, and their Python
fallbacks do the same work (same results, slower).

Before the extensions are compiled, contract/type_codes.h is written from the type table
(contract/type_table.py, :func:`c_header`) and contract/type_rules.h from the conversion rules
(contract/conversion_rules.py, by contract/conversion_rules_c.py): the C paths' codes and
calendar rules come from the same declarations as the Python paths' (neither is kept in git)."""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
TYPE_CODES = os.path.join("contract", "type_codes.h")
TYPE_RULES = os.path.join("contract", "type_rules.h")
RULES_SOURCE = os.path.join("contract", "conversion_rules.py")


def _write(relative: str, text: str) -> None:
    """Rewritten only when it changes, so that the extensions are not rebuilt for nothing."""
    path = os.path.join(ROOT, relative)
    if not os.path.exists(path) or open(path).read() != text:
        with open(path, "w") as f:
            f.write(text)


def write_generated_headers() -> None:
    """contract/type_codes.h from the type table, contract/type_rules.h from the conversion rules."""
    sys.path.insert(0, ROOT)
    try:
        from contract.conversion_rules_c import c_source
        from contract.type_table import c_header
    finally:
        sys.path.remove(ROOT)
    _write(TYPE_CODES, c_header())
    with open(os.path.join(ROOT, RULES_SOURCE)) as f:
        _write(TYPE_RULES, c_source(f.read()))


class BuildExtensions(build_ext):
    def run(self) -> None:
        write_generated_headers()
        super().run()


setup(cmdclass={"build_ext": BuildExtensions}, ext_modules=[Extension("contract.codecs._avro_reader", ["contract/codecs/_avro_reader.c"], optional=True,
                             extra_compile_args=["-O2"], depends=["contract/codecs/avro_read.h"]),
                   Extension("spark_jobs.sinks._copy_text", ["spark_jobs/sinks/_copy_text.c"], optional=True,
                             extra_compile_args=["-O2"], include_dirs=["contract/codecs", "contract"],
                             depends=["contract/codecs/avro_read.h", TYPE_CODES, "contract/type_table.py",
                                      TYPE_RULES, RULES_SOURCE, "contract/conversion_rules_c.py"]),
                   Extension("spark_jobs.task._change_scan", ["spark_jobs/task/_change_scan.c"],
                             optional=True, extra_compile_args=["-O2"], include_dirs=["contract/codecs"],
                             depends=["contract/codecs/avro_read.h"]),
                   Extension("contract.codecs._avro_json", ["contract/codecs/_avro_json.c"], optional=True,
                             extra_compile_args=["-O2"], depends=["contract/codecs/avro_json.h"]),
                   Extension("common.kafka._partitioner", ["common/kafka/_partitioner.c"], optional=True,
                             extra_compile_args=["-O2"]),
                   Extension("producer.events._binlog_images", ["producer/events/_binlog_images.c"], optional=True,
                             extra_compile_args=["-O2"], include_dirs=["contract"],
                             depends=["producer/events/avro_out.h", "producer/events/row_program.h",
                                      TYPE_RULES, RULES_SOURCE, "contract/conversion_rules_c.py"]),
                   Extension("producer.events._select_rows", ["producer/events/_select_rows.c"], optional=True,
                             extra_compile_args=["-O2"], include_dirs=["contract"],
                             depends=["producer/events/avro_out.h", "producer/events/row_program.h",
                                      TYPE_RULES, RULES_SOURCE, "contract/conversion_rules_c.py"]),
                   Extension("producer._native_producer", ["producer/_native_producer.c"], optional=True,
                             extra_compile_args=["-O2"], libraries=["dl"], include_dirs=["contract/codecs"],
                             depends=["contract/codecs/avro_json.h"])])
