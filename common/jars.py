"""Where the Java parts the project runs are: the jars ``make jars`` resolved from Maven
Central (versions in ``java/pom.xml``) into ``.jars/<module>/`` beside the checkout.

Nothing is downloaded at run time: a part whose jars are missing stops with the command
that fetches them.  ``CDC_JARS_DIR`` points elsewhere (an image that keeps them in
``/opt/cdc/jars``, say).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from common.errors import ConfigError

#: The checkout's jar directory (``make jars`` fills it).
DEFAULT_JARS_DIR = Path(__file__).resolve().parents[1] / ".jars"


def jars_dir() -> Path:
    return Path(os.environ.get("CDC_JARS_DIR") or DEFAULT_JARS_DIR)


def module_jars(module: str) -> list[Path]:
    """The jars of ``module`` (a module of ``java/pom.xml``: ``kafka``, ``spark``, ...),
    sorted; a clear error when ``make jars`` has not fetched them."""
    folder = jars_dir() / module
    jars = sorted(folder.glob("*.jar"))
    if not jars:
        raise ConfigError(f"no jars in {folder}: run 'make jars' (it resolves java/pom.xml's '{module}' module "
                          "from Maven Central into .jars/), or set CDC_JARS_DIR to where they are")
    return jars


def module_classpath(module: str) -> str:
    """``module``'s jars as a Java class path."""
    return os.pathsep.join(str(j) for j in module_jars(module))


def java_binary() -> str:
    """The ``java`` to run: ``$JAVA_HOME/bin/java``, else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise ConfigError("no 'java' on the PATH and no JAVA_HOME: Kafka and Spark need Java 17 "
                          "(apt-get install openjdk-17-jre-headless)")
    return found
