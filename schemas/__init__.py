"""The code's fixed Avro schemas (``*.avsc``); table schemas are derived at run time."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.resources import files


@lru_cache(maxsize=None)
def load(name: str) -> dict:
    """The parsed JSON of ``schemas/<name>.avsc``."""
    return json.loads(files(__name__).joinpath(f"{name}.avsc").read_text())
