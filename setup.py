"""The package's one compiled part (everything else is in pyproject.toml): the native Avro
reader of contract/avro_decoder.py.  Optional: where no C compiler is at hand the build goes
on without it, and the generated Python reads every record (same values, slower)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("contract._avro_reader", ["contract/_avro_reader.c"], optional=True,
                             extra_compile_args=["-O2"])])
