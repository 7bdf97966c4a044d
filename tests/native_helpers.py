"""What the tests of the compiled parts (setup.py's extensions) share."""

from __future__ import annotations

import os
import shutil
import sysconfig


def c_compiler() -> list[str] | None:
    """The command of this Python's C compiler (``CC`` as Python was built with), or ``cc``;
    None where neither is on the PATH.  What compiles plain C (the conversion rules' header)
    needs nothing more."""
    for cc in ((sysconfig.get_config_var("CC") or "").split(), ["cc"]):
        if cc and shutil.which(cc[0]) is not None:
            return cc
    return None


def can_build() -> bool:
    """Whether this Python could build the extensions: its C compiler and its headers (then
    ``make venv`` built them, and the native parts must be there)."""
    cc = (sysconfig.get_config_var("CC") or "").split()
    return bool(cc) and shutil.which(cc[0]) is not None and \
        os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
