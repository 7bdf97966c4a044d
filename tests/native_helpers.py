"""What the tests of the compiled parts (setup.py's extensions) share."""

from __future__ import annotations

import os
import shutil
import sysconfig


def can_build() -> bool:
    """Whether this Python could build the extensions: its C compiler and its headers (then
    ``make venv`` built them, and the native parts must be there)."""
    cc = (sysconfig.get_config_var("CC") or "").split()
    return bool(cc) and shutil.which(cc[0]) is not None and \
        os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
