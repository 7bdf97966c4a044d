"""docker/compose.yaml is consistent, checked without a Docker engine.

There is no Docker engine where the tests run, so ``docker compose up`` cannot be tried
here.  These tests parse the compose file (PyYAML), the Dockerfiles and the MySQL init
scripts and check what would otherwise only fail on a laptop with Docker: services,
pinned images, ``CDC__...`` names against the configuration model, a configuration that
validates, ports, volumes, healthchecks, referenced files, the signal table DDL and the
CDC user's grants, the monitoring services (Prometheus's targets and rules, the probes the
healthchecks ask, Grafana's provisioning), and that no secret is written in the repository.

Every check is a function returning a list of problems (empty = fine).  Each has a
positive test on the real files and a negative test on a broken copy, proving the check
would notice.
"""

from __future__ import annotations

import copy
import fnmatch
import re
import tomllib
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from cdc.demo_shards import SHARDS as SHARD_SOURCES
from cdc.demo_shards import shards_route
from cdc.stack.mysql_server import SIGNAL_DDL, quote_table
from common.config import SourceConfig, config_env_keys, load_config
from common.errors import ConfigError
from spark_jobs.errors import ColumnMappingMismatch
from spark_jobs.sharding.routes import Router
from spark_jobs.sharding.shapes import ShardId

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"
COMPOSE_PATH = DOCKER / "compose.yaml"
ENV_EXAMPLE_PATH = DOCKER / ".env.example"
INITDB = "/docker-entrypoint-initdb.d/"

REQUIRED_SERVICES = {"mysql", "kafka", "schema-registry", "postgres", "producer",
                     "spark-master", "spark-worker", "merge-job", "prometheus", "grafana"}
#: The cdc services' metrics ports, by the configuration key that sets each.
METRICS_PORTS = {"producer": "CDC__PRODUCER__METRICS_PORT", "merge-job": "CDC__SPARK__METRICS_PORT"}
MYSQL_FLAGS = ("--log-bin", "--binlog-format=ROW", "--binlog-row-image=FULL", "--binlog-row-metadata=FULL",
               "--server-id=1", "--gtid-mode=ON", "--enforce-gtid-consistency=ON")
CDC_GLOBAL_PRIVS = {"REPLICATION SLAVE", "REPLICATION CLIENT", "SELECT"}
CDC_SIGNAL_PRIVS = {"INSERT", "DELETE"}
PLACEHOLDER = "change-me"
SECRET_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|API_KEY|PRIVATE_KEY|CREDENTIAL", re.I)
# A whole value that is one compose reference without a default: ${VAR}, ${VAR:?msg}, ${VAR?msg}.
SECRET_REF = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(?::?\?[^}]*)?\}$")


# --- reading ------------------------------------------------------------------------------

def load_compose(path: Path = COMPOSE_PATH) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path}: top level must be a mapping"
    return data


def env_example_text() -> str:
    return ENV_EXAMPLE_PATH.read_text()


_REF = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
                  r"|\$(?P<plain>[A-Za-z_][A-Za-z0-9_]*)")


def dummy_value(name: str) -> str:
    """What a required variable without a value becomes: an ordinary password-like word."""
    return "dummy-" + name.lower().replace("_", "-")


def interpolate(value: Any, env: dict[str, str] | None = None) -> Any:
    """Compose variable substitution over a parsed document (values, not keys).

    ``$$`` is a literal ``$``; ``${VAR:-default}``/``${VAR-default}`` use the default when
    VAR is unset; ``${VAR}``, ``${VAR:?err}`` and ``${VAR?err}`` use ``env`` or else a
    dummy value (as a user's docker/.env would supply one).
    """
    env = env or {}
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match[str]) -> str:
        name = m.group("name") or m.group("plain")
        op, arg = m.group("op"), m.group("arg")
        have = env.get(name)
        if op in ("-", ":-"):
            return have if (have is not None and (have or op == "-")) else arg
        if op in ("+", ":+"):
            return arg if (have is not None and (have or op == "+")) else ""
        return have if have is not None else dummy_value(name)

    parts = value.split("$$")
    return "$".join(_REF.sub(sub, p) for p in parts)


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose.get("services") or {}


def env_of(service: dict[str, Any]) -> dict[str, str]:
    """A service's ``environment`` as name -> string, from either the mapping or list form."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        out = {}
        for item in env:
            name, _, val = str(item).partition("=")
            out[name] = val
        return out

    def text(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        return "" if v is None else str(v)
    return {str(k): text(v) for k, v in env.items()}


def cdc_env(service: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in env_of(service).items() if k.upper().startswith("CDC__")}


def service_config(compose: dict[str, Any], name: str):
    """The configuration a cdc service would load: its interpolated CDC__ variables only."""
    env = cdc_env(services(interpolate(compose))[name])
    return load_config(DOCKER / "no-such-cdc.yaml", environ=env, required=False)


def command_list(service: dict[str, Any]) -> list[str]:
    cmd = service.get("command") or []
    return cmd.split() if isinstance(cmd, str) else [str(c) for c in cmd]


def volume_entries(service: dict[str, Any]) -> list[dict[str, Any]]:
    """Volumes in long form: {type, source, target, read_only}."""
    out = []
    for v in service.get("volumes") or []:
        if isinstance(v, dict):
            out.append(v)
            continue
        parts = str(v).split(":")
        if len(parts) == 1:  # anonymous volume
            out.append({"type": "volume", "source": None, "target": parts[0]})
            continue
        src, target = parts[0], parts[1]
        kind = "bind" if src.startswith((".", "/", "~")) else "volume"
        out.append({"type": kind, "source": src, "target": target, "read_only": parts[2:3] == ["ro"]})
    return out


def init_scripts(compose: dict[str, Any], service: str = "mysql") -> list[tuple[str, str]]:
    """(name in /docker-entrypoint-initdb.d, text) of a MySQL service's init files, in run order."""
    mysql = services(interpolate(compose)).get(service) or {}
    found = []
    for vol in volume_entries(mysql):
        target = str(vol.get("target") or "")
        if vol.get("type") == "bind" and target.startswith(INITDB):
            src = (COMPOSE_PATH.parent / str(vol["source"])).resolve()
            found.append((target[len(INITDB):], src.read_text() if src.is_file() else ""))
    return sorted(found)


def strip_comments(text: str) -> str:
    """Drop SQL ``--`` comments and shell ``#`` comment lines."""
    lines = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        lines.append(re.sub(r"--(\s.*)?$", "", line))
    return "\n".join(lines)


def parse_port(entry: Any) -> tuple[str | None, int | None, int, str]:
    """(host_ip, host_port, container_port, protocol) of one ``ports`` entry."""
    if isinstance(entry, dict):
        pub = entry.get("published")
        return (entry.get("host_ip"), int(pub) if pub not in (None, "") else None,
                int(entry["target"]), entry.get("protocol", "tcp"))
    text, _, proto = str(entry).partition("/")
    parts = text.rsplit(":", 2)
    if len(parts) == 1:
        return None, None, int(parts[0]), proto or "tcp"
    if len(parts) == 2:
        return None, int(parts[0]) if parts[0] else None, int(parts[1]), proto or "tcp"
    return parts[0], int(parts[1]) if parts[1] else None, int(parts[2]), proto or "tcp"


def dockerfile_of(service: dict[str, Any]) -> tuple[Path, Path] | None:
    build = service.get("build")
    if not build:
        return None
    if isinstance(build, str):
        build = {"context": build}
    context = (COMPOSE_PATH.parent / build.get("context", ".")).resolve()
    return context, context / build.get("dockerfile", "Dockerfile")


# --- checks ------------------------------------------------------------------------------

def check_required_services(compose: dict[str, Any]) -> list[str]:
    missing = REQUIRED_SERVICES - set(services(compose))
    return [f"service {name!r} is missing" for name in sorted(missing)]


def _pin_problem(image: str) -> str | None:
    if "@sha256:" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    tag = last.partition(":")[2]
    if not tag:
        return f"image {image!r} has no tag (that means latest)"
    if tag == "latest" or not re.search(r"\d", tag):
        return f"image {image!r} is not pinned to a version"
    return None


def from_images(dockerfile_text: str) -> list[str]:
    """Base images of a Dockerfile's FROM lines (ARG defaults substituted, stage names skipped)."""
    args: dict[str, str] = {}
    stages: set[str] = set()
    images = []
    for line in dockerfile_text.splitlines():
        words = line.split()
        if not words:
            continue
        op = words[0].upper()
        if op == "ARG" and len(words) > 1 and not images:
            name, _, default = words[1].partition("=")
            args[name] = default
        elif op == "FROM":
            rest = [w for w in words[1:] if not w.startswith("--")]
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), ""), rest[0])
            if image.lower() not in stages:
                images.append(image)
            if len(rest) >= 3 and rest[1].upper() == "AS":
                stages.add(rest[2].lower())
    return images


def check_images_pinned(compose: dict[str, Any]) -> list[str]:
    problems = []
    for name, svc in services(compose).items():
        image = svc.get("image")
        if image is None and not svc.get("build"):
            problems.append(f"{name}: neither image nor build")
        if image is not None and (p := _pin_problem(str(image))):
            problems.append(f"{name}: {p}")
        df = dockerfile_of(svc)
        if df and df[1].is_file():
            for base in from_images(df[1].read_text()):
                if p := _pin_problem(base):
                    problems.append(f"{name}: {df[1].name} FROM: {p}")
    return problems


def check_cdc_env_names(compose: dict[str, Any]) -> list[str]:
    valid = config_env_keys()
    problems = []
    for name, svc in services(compose).items():
        for key in cdc_env(svc):
            if key != key.upper():
                problems.append(f"{name}: {key} should be written in upper case")
            if key.upper() not in valid:
                problems.append(f"{name}: {key} does not name a configuration key (common.config.config_env_keys())")
    return problems


def check_cdc_config_loads(compose: dict[str, Any]) -> list[str]:
    problems = []
    cdc_services = [n for n, s in services(compose).items() if cdc_env(s)]
    if not cdc_services:
        return ["no service is configured through CDC__ variables"]
    for name in cdc_services:
        try:
            service_config(compose, name)
        except ConfigError as exc:
            problems.append(f"{name}: the CDC__ environment does not validate: {exc}")
    return problems


def check_ports_unique(compose: dict[str, Any]) -> list[str]:
    seen: dict[tuple[int, str], str] = {}
    problems = []
    for name, svc in services(interpolate(compose)).items():
        for entry in svc.get("ports") or []:
            try:
                _, host, _, proto = parse_port(entry)
            except (ValueError, KeyError) as exc:
                problems.append(f"{name}: cannot read port {entry!r}: {exc}")
                continue
            if host is None:
                continue
            if (host, proto) in seen:
                problems.append(f"{name}: host port {host}/{proto} is also published by {seen[(host, proto)]}")
            seen[(host, proto)] = name
    return problems


def check_volumes_declared(compose: dict[str, Any]) -> list[str]:
    declared = set((compose.get("volumes") or {}).keys())
    used = set()
    problems = []
    for name, svc in services(compose).items():
        for vol in volume_entries(svc):
            if vol.get("type") == "volume" and vol.get("source"):
                used.add(vol["source"])
                if vol["source"] not in declared:
                    problems.append(f"{name}: volume {vol['source']!r} is not declared under top-level volumes")
    problems += [f"volume {v!r} is declared but no service uses it" for v in sorted(declared - used)]
    return problems


def _has_healthcheck(svc: dict[str, Any]) -> bool:
    hc = svc.get("healthcheck")
    if not hc or hc.get("disable"):
        return False
    test = hc.get("test")
    return bool(test) and test not in (["NONE"], "NONE")


def check_depends_on(compose: dict[str, Any]) -> list[str]:
    svcs = services(compose)
    problems = []
    for name, svc in svcs.items():
        deps = svc.get("depends_on") or {}
        if isinstance(deps, list):
            deps = {d: {"condition": "service_started"} for d in deps}
        for target, spec in deps.items():
            if target not in svcs:
                problems.append(f"{name}: depends_on {target!r}, which is not a service")
                continue
            if (spec or {}).get("condition") == "service_healthy" and not _has_healthcheck(svcs[target]):
                problems.append(f"{name}: waits for {target!r} to be healthy but it has no healthcheck")
    return problems


def check_healthchecks(compose: dict[str, Any]) -> list[str]:
    """Long-running infrastructure has healthchecks; MySQL's is ``mysqladmin ping``."""
    svcs = services(compose)
    mysqls = ["mysql", *(f"mysql-{n}" for n in SHARD_SOURCES)]
    problems = [f"{n}: no healthcheck" for n in (*mysqls, "kafka", "schema-registry", "postgres", "spark-master",
                                                 "producer", "merge-job", "prometheus", "grafana")
                if n in svcs and not _has_healthcheck(svcs[n])]
    for name in (n for n in mysqls if n in svcs):
        test = (svcs.get(name) or {}).get("healthcheck", {}).get("test")
        text = " ".join(test) if isinstance(test, list) else str(test)
        if "mysqladmin ping" not in text:
            problems.append(f"{name}: the healthcheck should use mysqladmin ping")
    return problems


def _dockerignore_excludes(patterns: list[str], path: str) -> bool:
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for pat in patterns:
        neg = pat.startswith("!")
        pat = pat.lstrip("!").strip("/")
        if any(fnmatch.fnmatchcase(c, pat) for c in candidates):
            excluded = not neg
    return excluded


def dockerfile_copy_sources(text: str) -> list[str]:
    """Context paths that COPY/ADD lines read (heredocs and --from copies skipped)."""
    sources = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        args = words[1:]
        if any(a.startswith("--from") for a in args) or any(a.startswith("<<") for a in args):
            continue
        args = [a for a in args if not a.startswith("--")]
        sources += args[:-1]
    return sources


def install_inputs() -> list[str]:
    """What ``pip install .`` needs from the context: pyproject.toml, its readme, its packages."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    needed = ["pyproject.toml"]
    readme = project["project"].get("readme")
    if isinstance(readme, str):
        needed.append(readme)
    includes = project.get("tool", {}).get("setuptools", {}).get("packages", {}).get("find", {}).get("include", [])
    for d in sorted(REPO.iterdir()):
        if (d / "__init__.py").is_file() and any(fnmatch.fnmatchcase(d.name, p) for p in includes):
            needed.append(d.name)
    return needed


def check_referenced_files(compose: dict[str, Any]) -> list[str]:
    problems = []
    for name, svc in services(interpolate(compose)).items():
        for vol in volume_entries(svc):
            if vol.get("type") == "bind":
                src = (COMPOSE_PATH.parent / str(vol["source"])).resolve()
                if not src.exists():
                    problems.append(f"{name}: bind mount source {vol['source']} does not exist ({src})")
        df = dockerfile_of(svc)
        if not df:
            continue
        context, dockerfile = df
        if not context.is_dir():
            problems.append(f"{name}: build context {context} is not a directory")
            continue
        if not dockerfile.is_file():
            problems.append(f"{name}: Dockerfile {dockerfile} does not exist")
            continue
        ignore_file = dockerfile.with_name(dockerfile.name + ".dockerignore")
        if not ignore_file.is_file():
            ignore_file = context / ".dockerignore"
        patterns = [ln.strip() for ln in ignore_file.read_text().splitlines()
                    if ln.strip() and not ln.strip().startswith("#")] if ignore_file.is_file() else []
        if not patterns:
            problems.append(f"{name}: no .dockerignore for context {context}: the whole tree (.venv, .cdc) would be sent")
        copied = dockerfile_copy_sources(dockerfile.read_text())
        for src in copied:
            if src in (".", "./"):
                continue
            if not (context / src).exists():
                problems.append(f"{name}: {dockerfile.name} copies {src}, which is not in the build context")
            elif _dockerignore_excludes(patterns, src):
                problems.append(f"{name}: {dockerfile.name} copies {src}, but {ignore_file.name} excludes it")
        if "pip install ." in dockerfile.read_text() and "." not in copied and "./" not in copied:
            for need in install_inputs():
                if need not in {c.rstrip("/") for c in copied}:
                    problems.append(f"{name}: {dockerfile.name} runs 'pip install .' but does not copy {need}")
    return problems


_CREATE_TABLE = re.compile(r"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(?P<name>[`\w.]+)\s*\(", re.I)


def _split_top_level(body: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in body:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def create_tables(sql: str) -> dict[str, dict[str, Any]]:
    """Parse CREATE TABLE statements: {db.table: {columns: {name: (TYPE, nullable)}, pk, options, statement}}."""
    out = {}
    for m in _CREATE_TABLE.finditer(sql):
        depth, i = 1, m.end()
        while i < len(sql) and depth:
            depth += {"(": 1, ")": -1}.get(sql[i], 0)
            i += 1
        body = sql[m.end():i - 1]
        end = sql.find(";", i)
        options = sql[i:end if end >= 0 else len(sql)]
        columns, pk = {}, []
        for item in _split_top_level(body):
            if re.match(r"PRIMARY\s+KEY", item, re.I):
                pk += [c.strip(" `") for c in re.search(r"\((.*)\)", item).group(1).split(",")]
                continue
            if re.match(r"(UNIQUE|KEY|INDEX|CONSTRAINT|FOREIGN)\b", item, re.I):
                continue
            cm = re.match(r"`?(\w+)`?\s+(\w+(?:\s*\([^)]*\))?)(.*)$", item, re.S)
            name, ctype, rest = cm.group(1), re.sub(r"\s+", "", cm.group(2)).upper(), cm.group(3).upper()
            columns[name] = (ctype, "NOT NULL" not in rest)
            if "PRIMARY KEY" in rest:
                pk.append(name)
        out[m.group("name").replace("`", "")] = {
            "columns": columns, "pk": pk, "options": " ".join(options.split()).upper(),
            "statement": sql[m.start():end if end >= 0 else len(sql)]}
    return out


def _normal_sql(stmt: str) -> str:
    s = " ".join(stmt.split()).rstrip(";").strip()
    return re.sub(r"\(\s+", "(", re.sub(r"\s+\)", ")", s))


def signal_table_name(compose: dict[str, Any]) -> str:
    producer = services(compose).get("producer") or {}
    return cdc_env(producer).get("CDC__SOURCE__SIGNAL_TABLE", SourceConfig().signal_table)


def check_signal_table(compose: dict[str, Any], scripts: list[tuple[str, str]] | None = None) -> list[str]:
    scripts = init_scripts(compose) if scripts is None else scripts
    table = signal_table_name(compose)
    db = table.split(".")[0]
    text = "\n".join(strip_comments(t) for _, t in scripts)
    tables = create_tables(text)
    if table not in tables:
        return [f"no init script creates the signal table {table}"]
    want = create_tables(SIGNAL_DDL.format(table=quote_table(table)))[table]
    got = tables[table]
    problems = []
    if got["columns"] != want["columns"]:
        problems.append(f"signal table columns {got['columns']} differ from SIGNAL_DDL's {want['columns']}")
    if got["pk"] != want["pk"]:
        problems.append(f"signal table primary key {got['pk']} differs from SIGNAL_DDL's {want['pk']}")
    if _normal_sql(got["statement"]) != _normal_sql(want["statement"]):
        problems.append("the signal table DDL is not the same statement as SIGNAL_DDL in cdc/stack/mysql_server.py:\n"
                        f"  init:        {_normal_sql(got['statement'])}\n  SIGNAL_DDL:  {_normal_sql(want['statement'])}")
    create_db = re.search(rf"CREATE\s+DATABASE\s+(IF\s+NOT\s+EXISTS\s+)?`?{re.escape(db)}`?", text, re.I)
    if not create_db or create_db.start() > text.find(got["statement"]):
        problems.append(f"database {db} is not created before the signal table")
    return problems


_GRANT = re.compile(r"GRANT\s+(?P<privs>.+?)\s+ON\s+(?P<obj>\S+)\s+TO\s+(?P<user>'[^']*'|`[^`]*`|\w+)"
                    r"(?:@(?P<host>'[^']*'|`[^`]*`|\S+?))?(?P<tail>[^;]*);", re.I | re.S)


def cdc_grants(scripts: list[tuple[str, str]], user: str = "cdc") -> tuple[dict[str, set[str]], list[str]]:
    grants: dict[str, set[str]] = {}
    notes = []
    for fname, text in scripts:
        for m in _GRANT.finditer(strip_comments(text)):
            if m.group("user").strip("'`") != user:
                continue
            obj = m.group("obj").replace("`", "")
            privs = {" ".join(p.split()).upper() for p in m.group("privs").split(",")}
            grants.setdefault(obj, set()).update(privs)
            if "GRANT OPTION" in m.group("tail").upper():
                notes.append(f"{fname}: the CDC user must not get WITH GRANT OPTION")
    return grants, notes


def check_cdc_grants(compose: dict[str, Any], scripts: list[tuple[str, str]] | None = None) -> list[str]:
    scripts = init_scripts(compose) if scripts is None else scripts
    user = cdc_env((services(compose).get("producer") or {})).get("CDC__SOURCE__USER", SourceConfig().user)
    table = signal_table_name(compose)
    grants, problems = cdc_grants(scripts, user)
    want = {"*.*": CDC_GLOBAL_PRIVS, table: CDC_SIGNAL_PRIVS}
    if grants != want:
        problems.append(f"the CDC user {user!r} is granted {grants}; it must get exactly {want}")
    created = [f for f, t in scripts if re.search(rf"CREATE\s+USER\s+(IF\s+NOT\s+EXISTS\s+)?'{user}'", t, re.I)]
    if not created:
        problems.append(f"no init script creates the user {user!r}")
    table_file = next((f for f, t in scripts if table in create_tables(strip_comments(t))), None)
    grant_files = [f for f, t in scripts if table in cdc_grants([(f, t)], user)[0]]
    if table_file and grant_files and min(grant_files) < table_file:
        problems.append(f"{min(grant_files)} grants on {table} before {table_file} creates it")
    return problems


def check_init_script_env(compose: dict[str, Any], scripts: list[tuple[str, str]] | None = None) -> list[str]:
    """Environment variables the init shell scripts read are set on the mysql service."""
    scripts = init_scripts(compose) if scripts is None else scripts
    mysql_env = set(env_of(services(compose).get("mysql") or {}))
    problems = []
    for fname, text in scripts:
        if not fname.endswith(".sh"):
            continue
        for var in sorted(set(re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", strip_comments(text)))):
            if var not in mysql_env:
                problems.append(f"{fname} reads ${var}, which the mysql service does not set")
    return problems


def check_mysql_service(compose: dict[str, Any]) -> list[str]:
    svcs = services(compose)
    mysql = svcs.get("mysql") or {}
    flags = command_list(mysql)
    problems = []
    for flag in MYSQL_FLAGS:
        if not any(f == flag or f.startswith(flag + "=") for f in flags):
            problems.append(f"mysql: command lacks {flag}")
    if not str(mysql.get("image", "")).startswith("mysql:8.4"):
        problems.append("mysql: the image should be mysql:8.4")
    targets = {name for name, _ in init_scripts(compose)}
    if "20-demo.sql" not in targets:
        problems.append("mysql: the demo schema is not mounted as 20-demo.sql")
    demo = [v for v in volume_entries(mysql) if str(v.get("target", "")).endswith("/20-demo.sql")]
    if demo and (COMPOSE_PATH.parent / str(demo[0]["source"])).resolve() != REPO / "cdc/demo_schema.sql":
        problems.append("mysql: 20-demo.sql is not cdc/demo_schema.sql")
    server_id = next((f.split("=", 1)[1] for f in flags if f.startswith("--server-id=")), None)
    if "producer" in svcs and server_id is not None and str(service_config(compose, "producer").source.server_id) == server_id:
        problems.append("producer: CDC__SOURCE__SERVER_ID must differ from the server's --server-id")
    return problems


TLS_MODES = ("required", "verify_ca", "verify_identity")
PG_TLS_MODES = ("require", "verify-ca", "verify-full")
PG_TLS_FLAGS = ("ssl=on", "ssl_cert_file=/etc/ssl/certs/ssl-cert-snakeoil.pem",
                "ssl_key_file=/etc/ssl/private/ssl-cert-snakeoil.key")
PG_HOSTSSL_SCRIPT = "./postgres/01-hostssl-only.sh:/docker-entrypoint-initdb.d/01-hostssl-only.sh:ro"


def check_tls(compose: dict[str, Any]) -> list[str]:
    """Every MySQL server accepts TLS connections only, the PostgreSQL server serves TLS and
    turns other hosts' plain connections away (hostssl), every cdc service connects to its
    sources with TLS (``ssl.mode`` required or stronger) and to the PostgreSQL sink with
    ``sslmode`` require or stronger."""
    svcs = services(compose)
    problems = []
    for name, svc in svcs.items():
        if str(svc.get("image", "")).startswith("mysql:") and "--require-secure-transport=ON" not in command_list(svc):
            problems.append(f"{name}: command lacks --require-secure-transport=ON")
        if str(svc.get("image", "")).startswith("postgres:"):
            cmd = command_list(svc)
            problems += [f"{name}: command lacks -c {f}" for f in PG_TLS_FLAGS
                         if not any(a == f and cmd[i - 1] == "-c" for i, a in enumerate(cmd) if i)]
            if PG_HOSTSSL_SCRIPT not in svc.get("volumes", []):
                problems.append(f"{name}: the hostssl-only init script is not mounted")
    for name, svc in svcs.items():
        if not any(k.startswith("CDC__SOURCE") for k in env_of(svc)):
            continue
        for src in service_config(compose, name).captured_sources():
            if src.config.ssl.mode not in TLS_MODES:
                problems.append(f"{name}: source {src.name} connects with ssl.mode {src.config.ssl.mode!r}, not TLS")
    for name, svc in svcs.items():
        if env_of(svc).get("CDC__SINKS__POSTGRES__ENABLED") != "true":
            continue
        dsn = service_config(compose, name).sinks.postgres.dsn.get_secret_value()
        mode = dict(parse_qsl(urlsplit(dsn).query)).get("sslmode")
        if mode not in PG_TLS_MODES:
            problems.append(f"{name}: the PostgreSQL sink connects with sslmode {mode!r}, not TLS")
    return problems


def pom_property(name: str) -> str:
    """A version of java/pom.xml (what ``make jars`` resolves)."""
    import xml.etree.ElementTree as ET
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.parse(Path(__file__).resolve().parents[1] / "java" / "pom.xml").getroot()
    return root.find(f"m:properties/m:{name}", ns).text.strip()


def check_kafka_service(compose: dict[str, Any]) -> list[str]:
    svcs = services(interpolate(compose))
    kafka = svcs.get("kafka") or {}
    env = env_of(kafka)
    problems = []
    if not str(kafka.get("image", "")).startswith("apache/kafka:"):
        problems.append("kafka: use the official apache/kafka image")
    elif str(kafka["image"]).split(":", 1)[1] != pom_property("kafka.version"):
        problems.append(f"kafka: the image {kafka['image']} is not the Kafka the embedded stack runs "
                        f"(java/pom.xml kafka.version {pom_property('kafka.version')})")
    roles = set(env.get("KAFKA_PROCESS_ROLES", "").split(","))
    if roles != {"broker", "controller"}:
        problems.append("kafka: KAFKA_PROCESS_ROLES must be broker,controller (single-node KRaft)")
    listeners = dict(re.findall(r"(\w+)://[^:,]*:(\d+)", env.get("KAFKA_LISTENERS", "")))
    advertised = dict(re.findall(r"(\w+)://([^,]+)", env.get("KAFKA_ADVERTISED_LISTENERS", "")))
    protocols = dict(p.split(":") for p in env.get("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "").split(",") if ":" in p)
    for lname in listeners:
        if lname not in protocols:
            problems.append(f"kafka: listener {lname} has no security protocol in KAFKA_LISTENER_SECURITY_PROTOCOL_MAP")
    controller = env.get("KAFKA_CONTROLLER_LISTENER_NAMES", "")
    voters = env.get("KAFKA_CONTROLLER_QUORUM_VOTERS", "")
    if controller not in listeners:
        problems.append("kafka: KAFKA_CONTROLLER_LISTENER_NAMES is not one of KAFKA_LISTENERS")
    elif voters != f"{env.get('KAFKA_NODE_ID')}@kafka:{listeners[controller]}":
        problems.append(f"kafka: KAFKA_CONTROLLER_QUORUM_VOTERS {voters!r} does not match node id and controller port")
    published = {c: h for _, h, c, _ in map(parse_port, kafka.get("ports") or [])}
    if "EXTERNAL" not in advertised:
        problems.append("kafka: no EXTERNAL listener for clients on the host")
    else:
        ext_port = advertised["EXTERNAL"].rpartition(":")[2]
        if published.get(int(listeners.get("EXTERNAL", 0))) != int(ext_port):
            problems.append("kafka: the EXTERNAL advertised port is not the published host port")
    internal = {addr for name, addr in advertised.items() if name != "EXTERNAL"}
    for name, svc in svcs.items():
        for var in ("CDC__KAFKA__BOOTSTRAP_SERVERS", "SCHEMA_REGISTRY_KAFKASTORE_BOOTSTRAP_SERVERS"):
            for addr in filter(None, env_of(svc).get(var, "").split(",")):
                if addr.split("://")[-1] not in internal:
                    problems.append(f"{name}: {var}={addr} is not an advertised in-network Kafka listener {internal}")
    return problems


def check_service_addresses(compose: dict[str, Any]) -> list[str]:
    """Hosts in the cdc configuration are compose services listening on those ports."""
    svcs = services(interpolate(compose))
    problems = []

    def exposes(host: str, port: int) -> bool:
        svc = svcs.get(host)
        if svc is None:
            return False
        ports = {c for _, _, c, _ in map(parse_port, svc.get("ports") or [])}
        text = " ".join(command_list(svc)) + " " + " ".join(env_of(svc).values())
        return port in ports or re.search(rf"[:\s]{port}\b", text) is not None
    for name, svc in services(compose).items():
        if not cdc_env(svc):
            continue
        cfg = service_config(compose, name)
        addrs = [("source", cfg.source.host, cfg.source.port)] if "CDC__SOURCE__HOST" in cdc_env(svc) else []
        addrs += [(f"source {entry.name}", entry.host, entry.port) for entry in cfg.sources]
        for server in cfg.kafka.bootstrap_servers.split(","):
            h, _, p = server.rpartition(":")
            addrs.append(("kafka", h, int(p)))
        if cfg.kafka.schema_registry_url:
            u = urlsplit(cfg.kafka.schema_registry_url)
            addrs.append(("schema registry", u.hostname, u.port or 80))
        if cfg.sinks.postgres.enabled:
            u = urlsplit(cfg.sinks.postgres.dsn.get_secret_value())
            addrs.append(("postgres sink", u.hostname, u.port or 5432))
        for what, host, port in addrs:
            if not exposes(host, port):
                problems.append(f"{name}: {what} address {host}:{port} is not a compose service listening there")
    return problems


def check_spark(compose: dict[str, Any]) -> list[str]:
    svcs = services(interpolate(compose))
    job = svcs.get("merge-job") or {}
    cmd = command_list(job)
    problems = []

    def arg(flag: str) -> str | None:
        return cmd[cmd.index(flag) + 1] if flag in cmd and cmd.index(flag) + 1 < len(cmd) else None
    if not cmd or cmd[0] != "spark-submit":
        problems.append("merge-job: the command must be spark-submit")
    if not any("spark_jobs.merge_job" in c for c in cmd):
        problems.append("merge-job: does not submit spark_jobs.merge_job")
    master = arg("--master")
    cfg = service_config(compose, "merge-job")
    if master != cfg.spark.master:
        problems.append(f"merge-job: --master {master} differs from CDC__SPARK__MASTER {cfg.spark.master}")
    m = re.fullmatch(r"spark://([\w.-]+):(\d+)", master or "")
    if not m or m.group(1) not in svcs or f"--port {m.group(2)}" not in " ".join(command_list(svcs[m.group(1)])):
        problems.append(f"merge-job: --master {master} is not the spark-master service's port")
    if cfg.spark.kafka_source != "jvm":
        problems.append("merge-job: CDC__SPARK__KAFKA_SOURCE should be jvm (the connector is in the image)")
    if not cfg.sinks.postgres.enabled:
        problems.append("merge-job: the PostgreSQL sink is not enabled")
    published = {c for _, _, c, _ in map(parse_port, job.get("ports") or [])}
    if cfg.spark.ui_port is None or cfg.spark.ui_port not in published:
        problems.append(f"merge-job: Spark's UI port (CDC__SPARK__UI_PORT={cfg.spark.ui_port}) is not a published "
                        f"container port {sorted(published)}")
    # The Java parts: the image's jars stage resolves java/pom.xml's spark module (the versions
    # `make jars` pins) into CDC_JARS_DIR, and spark-submit passes them with --jars.
    df = dockerfile_of(job)
    text = df[1].read_text() if df and df[1].is_file() else ""
    jars_dir = re.search(r"CDC_JARS_DIR=(\S+)", text)
    if not re.search(r"mvn .*-f java/pom\.xml .*-pl spark\b.*dependency:copy-dependencies", text):
        problems.append("merge-job: its image does not resolve java/pom.xml's spark module (mvn ... -pl spark)")
    if not jars_dir:
        problems.append("merge-job: its image sets no CDC_JARS_DIR")
    elif arg("--jars") != f"{jars_dir.group(1)}/spark/*.jar":
        problems.append(f"merge-job: --jars {arg('--jars')} is not the image's {jars_dir.group(1)}/spark/*.jar")
    version = re.search(r"<spark\.version>([^<]+)</spark\.version>", (REPO / "java" / "pom.xml").read_text()).group(1)
    spec = next(d for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
                if re.match(r"pyspark\b", d))
    if version not in SpecifierSet(spec[len("pyspark"):]):
        problems.append(f"java/pom.xml: Spark {version} is outside the project's {spec}")
    for name in ("spark-master", "spark-worker", "merge-job"):
        build = (svcs.get(name) or {}).get("build") or {}
        arg_version = (build.get("args") or {}).get("SPARK_VERSION") if isinstance(build, dict) else None
        if arg_version != version:
            problems.append(f"{name}: build arg SPARK_VERSION={arg_version} differs from java/pom.xml's Spark {version}")
    return problems


def _created_databases(scripts: list[tuple[str, str]]) -> list[str]:
    text = "\n".join(strip_comments(t) for _, t in scripts)
    return [m.group(1) for m in re.finditer(r"CREATE\s+DATABASE\s+(?:IF\s+NOT\s+EXISTS\s+)?`?(\w+)`?", text, re.I)]


def check_shards_profile(compose: dict[str, Any], shard_scripts: dict[str, list[tuple[str, str]]] | None = None
                         ) -> list[str]:
    """The profile ``shards`` is what ``make demo-shards`` runs (cdc/demo_shards.py): a MySQL
    server and a producer per source of the demo, holding the demo's shard databases, and a
    merge job with the demo's route (origin columns, column mapping, pessimistic DDL) on the
    cdc-kafka source, without a schema registry (routes read the ``_schemas`` topics); each
    server like ``mysql`` (binlog flags, the signal table, the CDC user's grants); every shard
    routed and matched by the column mapping."""
    svcs = services(compose)
    names = ["merge-job-shards", *(f"{kind}-{n}" for n in SHARD_SOURCES for kind in ("mysql", "producer"))]
    problems = [f"profile shards: service {n!r} is missing" for n in names if n not in svcs]
    problems += [f"{n}: not in the profile 'shards' only" for n in names if n in svcs and svcs[n].get("profiles") != ["shards"]]
    if problems:
        return problems
    job = service_config(compose, "merge-job-shards")
    if [e.name for e in job.sources] != list(SHARD_SOURCES):
        problems.append(f"merge-job-shards: sources {[e.name for e in job.sources]}, the demo's are {list(SHARD_SOURCES)}")
    if job.routes != [shards_route("pessimistic")]:
        problems.append(f"merge-job-shards: routes {job.routes} differ from make demo-shards' {[shards_route()]}")
    if job.spark.kafka_source != "python":
        problems.append("merge-job-shards: a pessimistic route needs CDC__SPARK__KAFKA_SOURCE=python")
    if job.kafka.schema_registry_url:
        problems.append("merge-job-shards: routes read the sources' _schemas topics: no schema registry")
    if not job.sinks.postgres.enabled:
        problems.append("merge-job-shards: the PostgreSQL sink is not enabled")
    router = Router(job.routes)
    reference = {f: t for f, t in init_scripts(compose) if f != "20-demo.sql"}
    server_ids: dict[str, str] = {}
    for entry in job.sources:
        server, producer = f"mysql-{entry.name}", f"producer-{entry.name}"
        if (entry.host, entry.port) != (server, 3306):
            problems.append(f"source {entry.name}: {entry.host}:{entry.port} is not {server}:3306")
        pcfg = service_config(compose, producer)
        if command_list(svcs[producer]) != ["cdc", "produce", "--source", entry.name]:
            problems.append(f"{producer}: the command must be cdc produce --source {entry.name}")
        if (pcfg.sources, pcfg.routes, pcfg.kafka.topic_prefix) != (job.sources, job.routes, job.kafka.topic_prefix):
            problems.append(f"{producer}: sources, routes or topic prefix differ from merge-job-shards'")
        flags = command_list(svcs[server])
        problems += [f"{server}: command lacks {flag}" for flag in MYSQL_FLAGS if not flag.startswith("--server-id")
                     and not any(f == flag or f.startswith(flag + "=") for f in flags)]
        sid = next((f.split("=", 1)[1] for f in flags if f.startswith("--server-id=")), None)
        if sid is None or sid in [*server_ids.values(), "1"] or sid == str(entry.server_id):
            problems.append(f"{server}: --server-id={sid} is another server's or the producer's")
        server_ids[server] = sid
        scripts = (shard_scripts or {}).get(server) or init_scripts(compose, server)
        for f, text in reference.items():
            if dict(scripts).get(f) != text:
                problems.append(f"{server}: init script {f} is not mysql's")
        problems += [f"{server}: {p}" for p in check_cdc_grants(compose, scripts) + check_signal_table(compose, scripts)]
        dbs = sorted(set(_created_databases(scripts)) - {signal_table_name(compose).split(".")[0]})
        if dbs != SHARD_SOURCES[entry.name]:
            problems.append(f"{server}: creates the databases {dbs}, make demo-shards' {entry.name} has "
                            f"{SHARD_SOURCES[entry.name]}")
        tables = create_tables("\n".join(strip_comments(t) for _, t in scripts))
        for db in dbs:
            if f"{db}.orders" not in tables:
                problems.append(f"{server}: no table {db}.orders")
            if not any(re.fullmatch(p, db) for p in entry.include_databases):
                problems.append(f"source {entry.name}: include_databases {entry.include_databases} leaves out {db}")
            route = router.route_of(entry.name, db, "orders")
            if route is None or route.name != "shop.orders":
                problems.append(f"{entry.name}/{db}.orders is not routed to shop.orders")
                continue
            try:
                route.values(ShardId(entry.name, db, "orders"))
            except ColumnMappingMismatch as exc:
                problems.append(str(exc))
    return problems


def _mount_source(svc: dict[str, Any], target: str) -> Path | None:
    """The file or directory of the repository bind-mounted at ``target``."""
    for vol in volume_entries(svc):
        if vol.get("type") == "bind" and vol.get("target") == target:
            return (COMPOSE_PATH.parent / str(vol["source"])).resolve()
    return None


def check_monitoring(compose: dict[str, Any], prometheus: dict[str, Any] | None = None,
                     datasources: dict[str, Any] | None = None) -> list[str]:
    """Prometheus scrapes every cdc service on its metrics port with the repository's alert
    rules; the cdc services' healthchecks ask their own probes; Grafana gets the data source
    (the prometheus service) and the dashboards directory its provider names."""
    svcs = services(interpolate(compose))
    prom_svc, grafana = svcs.get("prometheus") or {}, svcs.get("grafana") or {}
    problems = []
    conf_path = _mount_source(prom_svc, "/etc/prometheus/prometheus.yml")
    if conf_path is None or not conf_path.is_file():
        return ["prometheus: docker/prometheus/prometheus.yml is not mounted at /etc/prometheus/prometheus.yml"]
    prom = prometheus if prometheus is not None else yaml.safe_load(conf_path.read_text())
    for rules in prom.get("rule_files") or []:
        if _mount_source(prom_svc, rules) != REPO / "cdc" / "monitoring" / "alerts.yml":
            problems.append(f"prometheus: the rule file {rules} is not cdc/monitoring/alerts.yml")
    if not prom.get("rule_files"):
        problems.append("prometheus: no rule_files (cdc/monitoring/alerts.yml)")
    targets = {t for job in prom.get("scrape_configs") or [] for sc in job.get("static_configs") or []
               for t in sc.get("targets") or []}
    for name, key in METRICS_PORTS.items():
        port = env_of(svcs.get(name) or {}).get(key)
        if not port:
            problems.append(f"{name}: no {key}: nothing to scrape")
            continue
        if f"{name}:{port}" not in targets:
            problems.append(f"prometheus: does not scrape {name}:{port} ({key}); its targets: {sorted(targets)}")
        test = (svcs.get(name) or {}).get("healthcheck", {}).get("test")
        text = " ".join(test) if isinstance(test, list) else str(test)
        if not re.search(rf"localhost:{port}/(readyz|healthz)\b", text):
            problems.append(f"{name}: the healthcheck does not ask the probes on its metrics port {port}")
    for target in sorted(targets):
        host, _, port = target.rpartition(":")
        if host not in ("localhost", *METRICS_PORTS) or (host in METRICS_PORTS and
                                                         env_of(svcs[host]).get(METRICS_PORTS[host]) != port):
            problems.append(f"prometheus: target {target} is not a cdc service's metrics port")
    provisioning = _mount_source(grafana, "/etc/grafana/provisioning")
    if provisioning is None or not provisioning.is_dir():
        return problems + ["grafana: docker/grafana/provisioning is not mounted at /etc/grafana/provisioning"]
    ds = datasources if datasources is not None else yaml.safe_load(
        (provisioning / "datasources" / "prometheus.yml").read_text())
    for source in ds.get("datasources") or []:
        u = urlsplit(source.get("url", ""))
        ports = {c for _, _, c, _ in map(parse_port, prom_svc.get("ports") or [])}
        if u.hostname != "prometheus" or u.port not in ports:
            problems.append(f"grafana: data source {source.get('url')} is not the prometheus service")
    for provider in yaml.safe_load((provisioning / "dashboards" / "cdc.yml").read_text())["providers"]:
        path = provider["options"]["path"]
        mounted = _mount_source(grafana, path)
        if mounted is None or not list(mounted.glob("*.json")):
            problems.append(f"grafana: the dashboards path {path} is not a mounted directory of dashboards")
    return problems


def _secret_values(compose_raw: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, value) of every environment entry whose name says it is a secret."""
    out = []
    for name, svc in services(compose_raw).items():
        for key, value in env_of(svc).items():
            if SECRET_NAME.search(key):
                out.append((f"{name}.environment.{key}", value))
    return out


def _all_strings(node: Any, where: str = "") -> list[tuple[str, str]]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in _all_strings(v, f"{where}.{k}" if where else str(k))]
    if isinstance(node, list):
        return [s for i, v in enumerate(node) for s in _all_strings(v, f"{where}[{i}]")]
    return [(where, node)] if isinstance(node, str) else []


def check_no_secrets(compose_raw: dict[str, Any], env_example: str | None = None,
                     scripts: list[tuple[str, str]] | None = None) -> list[str]:
    env_example = env_example_text() if env_example is None else env_example
    scripts = init_scripts(compose_raw) if scripts is None else scripts
    problems = []
    for where, value in _secret_values(compose_raw):
        if not (SECRET_REF.match(value) or value == PLACEHOLDER):
            problems.append(f"{where}: a secret must be a ${{VAR}} / ${{VAR:?...}} reference, not {value!r}")
    for where, value in _all_strings(compose_raw):
        # References (with or without defaults) become "$REF"; a default that holds a
        # secret is caught above.  What is left must not carry a literal password.
        text = re.sub(r"\$\{[^}]*\}", "$REF", value)
        for m in re.finditer(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:([^@\s]+)@", text):
            if not m.group(1).startswith("$"):
                problems.append(f"{where}: the URL carries a literal password {m.group(1)!r}")
        for m in re.finditer(r"(?i)(?:password|passwd|pwd)\w*\s*[=:]\s*['\"]?([^'\"\s,;]+)", text):
            if not (m.group(1).startswith("$") or m.group(1) == PLACEHOLDER):
                problems.append(f"{where}: literal password {m.group(1)!r}")
        for m in re.finditer(r"(?:^|\s)-p(?!\s)['\"]?([^'\"\s]+)", text):
            if not m.group(1).startswith("$"):
                problems.append(f"{where}: literal password in -p{m.group(1)}")
    for line in env_example.splitlines():
        m = re.match(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$", line)
        if m and SECRET_NAME.search(m.group(1)) and m.group(2).strip().strip("'\"") not in (PLACEHOLDER, ""):
            problems.append(f".env.example: {m.group(1)} must be the placeholder {PLACEHOLDER!r}")
    for fname, text in scripts:
        for m in re.finditer(r"IDENTIFIED\s+(?:WITH\s+\S+\s+)?BY\s+'([^']*)'", strip_comments(text), re.I):
            if "$" not in m.group(1):
                problems.append(f"{fname}: a password is written in the init script")
    return problems


def compose_variables(compose_raw: dict[str, Any]) -> dict[str, tuple[str | None, str | None]]:
    """Every ${VAR...} the compose file reads: name -> (operator, argument)."""
    found: dict[str, tuple[str | None, str | None]] = {}
    for _, value in _all_strings(compose_raw):
        for part in value.split("$$"):
            for m in _REF.finditer(part):
                name = m.group("name") or m.group("plain")
                if found.get(name, (None,))[0] is None or m.group("op"):
                    found[name] = (m.group("op"), m.group("arg"))
    return found


def check_env_example(compose_raw: dict[str, Any], env_example: str | None = None) -> list[str]:
    """docker/.env.example sets every required variable and documents only variables compose reads."""
    env_example = env_example_text() if env_example is None else env_example
    used = compose_variables(compose_raw)
    set_vars, commented = {}, {}
    for line in env_example.splitlines():
        m = re.match(r"\s*([A-Z_][A-Z0-9_]*)=(.*)$", line)
        c = re.match(r"\s*#\s*([A-Z_][A-Z0-9_]*)=(\S*)\s*$", line)
        if m:
            set_vars[m.group(1)] = m.group(2).strip()
        elif c:
            commented[c.group(1)] = c.group(2)
    problems = []
    for name, (op, arg) in sorted(used.items()):
        if op in (None, "?", ":?") and name not in set_vars:
            problems.append(f".env.example does not set {name}, which compose requires")
        if op in ("-", ":-") and name in commented and commented[name] != arg:
            problems.append(f".env.example documents {name}={commented[name]} but the compose default is {arg}")
    for name in sorted(set(set_vars) | set(commented)):
        if name not in used:
            problems.append(f".env.example mentions {name}, which compose.yaml never reads")
    return problems


ALL_CHECKS: dict[str, Callable[..., list[str]]] = {
    "required_services": check_required_services,
    "images_pinned": check_images_pinned,
    "cdc_env_names": check_cdc_env_names,
    "cdc_config_loads": check_cdc_config_loads,
    "ports_unique": check_ports_unique,
    "volumes_declared": check_volumes_declared,
    "depends_on": check_depends_on,
    "healthchecks": check_healthchecks,
    "referenced_files": check_referenced_files,
    "signal_table": check_signal_table,
    "cdc_grants": check_cdc_grants,
    "init_script_env": check_init_script_env,
    "mysql_service": check_mysql_service,
    "kafka_service": check_kafka_service,
    "service_addresses": check_service_addresses,
    "spark": check_spark,
    "monitoring": check_monitoring,
    "no_secrets": check_no_secrets,
    "env_example": check_env_example,
    "shards_profile": check_shards_profile,
    "tls": check_tls,
}


# --- the real files are consistent -------------------------------------------------------

@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


@pytest.mark.parametrize("check", sorted(ALL_CHECKS))
def test_compose_is_consistent(compose: dict[str, Any], check: str) -> None:
    problems = ALL_CHECKS[check](copy.deepcopy(compose))
    assert problems == [], "\n".join(problems)


def test_cdc_services_get_the_intended_configuration(compose: dict[str, Any]) -> None:
    producer = service_config(compose, "producer")
    assert producer.source.host == "mysql" and producer.source.user == "cdc"
    assert producer.source.password.get_secret_value() == dummy_value("CDC_PASSWORD")
    assert producer.source.exclude_databases == ["cdc_sink"]
    assert producer.kafka.bootstrap_servers == "kafka:9092"
    assert producer.kafka.schema_registry_url == "http://schema-registry:8081"
    job = service_config(compose, "merge-job")
    assert job.spark.kafka_source == "jvm" and job.spark.master == "spark://spark-master:7077"
    assert job.sinks.postgres.enabled
    assert job.sinks.postgres.dsn.get_secret_value() == (
        f"postgresql://cdc:{dummy_value('POSTGRES_PASSWORD')}@postgres:5432/cdc_sink?sslmode=require")
    assert job.kafka.topic_prefix == producer.kafka.topic_prefix


def test_the_shards_profile_is_make_demo_shards(compose: dict[str, Any]) -> None:
    job = service_config(compose, "merge-job-shards")
    assert [(e.name, e.host, e.include_databases) for e in job.sources] == [
        ("east", "mysql-east", ["shop_0[12]"]), ("west", "mysql-west", ["shop_0[34]"])]
    assert [e.password.get_secret_value() for e in job.sources] == [dummy_value("CDC_PASSWORD")] * 2
    [route] = Router(job.routes).routes
    assert route.columns == ("__source", "__db", "__table", "region", "shard") and route.ddl == "pessimistic"
    assert route.values(ShardId("west", "shop_03", "orders"))["shard"] == "03"
    assert job.sinks.postgres.schema_name == "shards" and job.spark.master == "local[2]"
    assert _created_databases(init_scripts(compose, "mysql-west")) == ["cdc_control", "shop_03", "shop_04"]


def test_signal_table_ddl_is_parsed_like_the_embedded_stack() -> None:
    table = SourceConfig().signal_table
    parsed = create_tables(SIGNAL_DDL.format(table=quote_table(table)))[table]
    assert parsed["columns"] == {"id": ("VARCHAR(64)", False), "type": ("VARCHAR(32)", False),
                                 "data": ("VARCHAR(2048)", True)}
    assert parsed["pk"] == ["id"]


def test_interpolation_follows_compose_rules() -> None:
    assert interpolate("${A:-x}") == "x" and interpolate("${A:-x}", {"A": "y"}) == "y"
    assert interpolate("${A:-x}", {"A": ""}) == "x" and interpolate("${A-x}", {"A": ""}) == ""
    assert interpolate("${A:?set A}") == dummy_value("A") and interpolate("$A/$${B}", {"A": "1"}) == "1/${B}"
    assert interpolate(["p:${P:-5}", {"k": "${Q}"}], {"Q": "q"}) == ["p:5", {"k": "q"}]


# --- each check notices when its subject is broken ---------------------------------------

def _svc(c: dict[str, Any], name: str) -> dict[str, Any]:
    return c["services"][name]


def _update(c: dict[str, Any], service: str, **fields: Any) -> dict[str, Any]:
    _svc(c, service).update(fields)
    return {}


def _pop(c: dict[str, Any], service: str, key: str | None = None) -> dict[str, Any]:
    if key is None:
        c["services"].pop(service)
    else:
        _svc(c, service).pop(key)
    return {}


def _set_env(c: dict[str, Any], service: str, key: str, value: str) -> dict[str, Any]:
    _svc(c, service)["environment"] = {**env_of(_svc(c, service)), key: value}
    return {}


def _del_env(c: dict[str, Any], service: str, key: str) -> dict[str, Any]:
    _svc(c, service)["environment"] = {k: v for k, v in env_of(_svc(c, service)).items() if k != key}
    return {}


def _cmd_replace(c: dict[str, Any], service: str, old: str, new: str) -> dict[str, Any]:
    cmd = command_list(_svc(c, service))
    assert old in cmd, f"{old!r} not in {service}'s command"
    _svc(c, service)["command"] = [new if x == old else x for x in cmd]
    return {}


def _scripts_with(c: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    scripts = init_scripts(c)
    assert any(old in t for _, t in scripts), f"{old!r} not found in the init scripts"
    return {"scripts": [(f, t.replace(old, new)) for f, t in scripts]}


def _env_example_with(old: str, new: str) -> dict[str, Any]:
    text = env_example_text()
    assert old in text, f"{old!r} not in .env.example"
    return {"env_example": text.replace(old, new)}


SPARK_JARS = "/opt/cdc/jars/spark/*.jar"

# (check, what is broken, breaker): the breaker damages a copy of the parsed compose file
# and returns extra keyword arguments for the check (damaged init scripts or .env.example).
BREAKAGES: list[tuple[str, str, Callable[[dict[str, Any]], dict[str, Any]]]] = [
    ("required_services", "no schema registry", lambda c: _pop(c, "schema-registry")),
    ("images_pinned", "latest tag", lambda c: _update(c, "postgres", image="postgres:latest")),
    ("images_pinned", "no tag", lambda c: _update(c, "kafka", image="apache/kafka")),
    ("cdc_env_names", "misspelled key", lambda c: _set_env(c, "producer", "CDC__SOURCE__HOSTNAME", "mysql")),
    ("cdc_env_names", "section that does not exist",
     lambda c: _set_env(c, "merge-job", "CDC__SPARKS__MASTER", "local[2]")),
    ("cdc_config_loads", "value of the wrong type",
     lambda c: _set_env(c, "producer", "CDC__SOURCE__PORT", "three-thousand")),
    ("cdc_config_loads", "value outside the allowed set",
     lambda c: _set_env(c, "merge-job", "CDC__SPARK__KAFKA_SOURCE", "scala")),
    ("ports_unique", "two services on one host port",
     lambda c: _update(c, "postgres", ports=["127.0.0.1:${MYSQL_PORT:-3306}:5432"])),
    ("volumes_declared", "undeclared named volume",
     lambda c: _update(c, "postgres", volumes=["pgdata:/var/lib/postgresql/data"])),
    ("depends_on", "unknown target",
     lambda c: _update(c, "producer", depends_on={**_svc(c, "producer")["depends_on"], "zookeeper": {}})),
    ("depends_on", "healthy condition without a healthcheck", lambda c: _pop(c, "kafka", "healthcheck")),
    ("healthchecks", "mysql healthcheck without mysqladmin ping",
     lambda c: _update(c, "mysql", healthcheck={"test": ["CMD", "true"]})),
    ("referenced_files", "missing bind mount source",
     lambda c: _update(c, "mysql", volumes=[*_svc(c, "mysql")["volumes"],
                                            "./mysql/init/99-missing.sql:/docker-entrypoint-initdb.d/99.sql:ro"])),
    ("referenced_files", "missing Dockerfile",
     lambda c: _update(c, "producer", build={"context": "..", "dockerfile": "docker/nope.Dockerfile"})),
    ("referenced_files", "build context that lacks the copied files",
     lambda c: _update(c, "producer", build={"context": ".", "dockerfile": "producer.Dockerfile"})),
    ("mysql_service", "binlog row metadata flag dropped",
     lambda c: _update(c, "mysql", command=[f for f in command_list(_svc(c, "mysql"))
                                            if not f.startswith("--binlog-row-metadata")])),
    ("mysql_service", "producer server id equals the server's",
     lambda c: _set_env(c, "producer", "CDC__SOURCE__SERVER_ID", "1")),
    ("kafka_service", "another Kafka than the embedded stack's",
     lambda c: _update(c, "kafka", image="apache/kafka:3.9.0")),
    ("kafka_service", "bootstrap address not advertised",
     lambda c: _set_env(c, "producer", "CDC__KAFKA__BOOTSTRAP_SERVERS", "kafka:29092")),
    ("kafka_service", "quorum voters on the wrong port",
     lambda c: _set_env(c, "kafka", "KAFKA_CONTROLLER_QUORUM_VOTERS", "1@kafka:9999")),
    ("kafka_service", "EXTERNAL advertised port not published",
     lambda c: _update(c, "kafka", ports=["127.0.0.1:19094:9094"])),
    ("service_addresses", "source host is not a service",
     lambda c: _set_env(c, "producer", "CDC__SOURCE__HOST", "mysql-primary")),
    ("service_addresses", "sink DSN points at a missing service",
     lambda c: _set_env(c, "merge-job", "CDC__SINKS__POSTGRES__DSN", "postgresql://cdc:${POSTGRES_PASSWORD}@pg:5432/x")),
    ("spark", "master URL differs from the configuration",
     lambda c: _set_env(c, "merge-job", "CDC__SPARK__MASTER", "local[*]")),
    ("spark", "image of another Spark version than the connectors'",
     lambda c: _update(c, "merge-job", build={**_svc(c, "merge-job")["build"], "args": {"SPARK_VERSION": "3.5.1"}})),
    ("spark", "connectors not passed to spark-submit",
     lambda c: _cmd_replace(c, "merge-job", SPARK_JARS, "/opt/elsewhere/*.jar")),
    ("spark", "job module not submitted",
     lambda c: _cmd_replace(c, "merge-job", "spark_jobs.merge_job", "spark_jobs.other")),
    ("spark", "Spark's UI port not published", lambda c: _set_env(c, "merge-job", "CDC__SPARK__UI_PORT", "4041")),
    ("monitoring", "producer without a metrics port", lambda c: _del_env(c, "producer", "CDC__PRODUCER__METRICS_PORT")),
    ("monitoring", "merge job's metrics port not scraped",
     lambda c: _set_env(c, "merge-job", "CDC__SPARK__METRICS_PORT", "9200")),
    ("monitoring", "healthcheck on another port",
     lambda c: _update(c, "producer", healthcheck={"test": ["CMD", "python", "-c", "import urllib.request; "
                                                   "urllib.request.urlopen('http://localhost:9999/readyz')"]})),
    ("monitoring", "alert rules not mounted",
     lambda c: _update(c, "prometheus", volumes=[v for v in _svc(c, "prometheus")["volumes"] if "alerts" not in v])),
    ("monitoring", "a target that is no metrics port",
     lambda c: {"prometheus": {"rule_files": ["/etc/prometheus/alerts.yml"], "scrape_configs": [
         {"job_name": "x", "static_configs": [{"targets": ["producer:9100", "merge-job:9101", "kafka:9092"]}]}]}}),
    ("monitoring", "Grafana's data source elsewhere",
     lambda c: {"datasources": {"datasources": [{"url": "http://prom:9090"}]}}),
    ("monitoring", "dashboards not mounted",
     lambda c: _update(c, "grafana", volumes=[v for v in _svc(c, "grafana")["volumes"] if "dashboards" not in v])),
    ("healthchecks", "merge job without a healthcheck", lambda c: _pop(c, "merge-job", "healthcheck")),
    ("no_secrets", "literal password in the environment",
     lambda c: _set_env(c, "mysql", "MYSQL_ROOT_PASSWORD", "hunter2")),
    ("no_secrets", "password with a literal default",
     lambda c: _set_env(c, "postgres", "POSTGRES_PASSWORD", "${POSTGRES_PASSWORD:-hunter2}")),
    ("no_secrets", "literal password inside a DSN",
     lambda c: _set_env(c, "merge-job", "CDC__SINKS__POSTGRES__DSN", "postgresql://cdc:hunter2@postgres:5432/cdc_sink")),
    ("no_secrets", "literal password in a healthcheck",
     lambda c: _update(c, "mysql", healthcheck={"test": ["CMD-SHELL", "mysqladmin ping -uroot -phunter2"]})),
    ("no_secrets", "real-looking password in .env.example",
     lambda c: _env_example_with("CDC_PASSWORD=change-me", "CDC_PASSWORD=Tr0ub4dor&3")),
    ("no_secrets", "password written in the init script",
     lambda c: _scripts_with(c, "'${cdc_password_sql}'", "'hunter2'")),
    ("env_example", "required variable missing from .env.example",
     lambda c: _env_example_with("POSTGRES_PASSWORD=change-me", "")),
    ("env_example", "variable compose never reads",
     lambda c: {"env_example": env_example_text() + "\nCDC_PASSWRD=change-me\n"}),
    ("env_example", "documented default differs",
     lambda c: _env_example_with("# MYSQL_PORT=3306", "# MYSQL_PORT=3307")),
    ("signal_table", "column type differs",
     lambda c: _scripts_with(c, "`data` VARCHAR(2048) NULL", "`data` TEXT NULL")),
    ("signal_table", "column renamed",
     lambda c: _scripts_with(c, "`type` VARCHAR(32) NOT NULL", "`kind` VARCHAR(32) NOT NULL")),
    ("signal_table", "nullability differs",
     lambda c: _scripts_with(c, "`type` VARCHAR(32) NOT NULL", "`type` VARCHAR(32) NULL")),
    ("signal_table", "table options differ",
     lambda c: _scripts_with(c, "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;", "ENGINE=MyISAM;")),
    ("signal_table", "signal table not created",
     lambda c: {"scripts": [s for s in init_scripts(c) if "CREATE TABLE" not in s[1]]}),
    ("cdc_grants", "extra global privilege",
     lambda c: _scripts_with(c, "REPLICATION CLIENT, SELECT ON *.*", "REPLICATION CLIENT, SELECT, SUPER ON *.*")),
    ("cdc_grants", "write access beyond the signal table",
     lambda c: _scripts_with(c, "GRANT INSERT, DELETE ON cdc_control.cdc_signal", "GRANT INSERT, DELETE ON cdc_control.*")),
    ("cdc_grants", "ALL PRIVILEGES",
     lambda c: _scripts_with(c, "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON", "GRANT ALL PRIVILEGES ON")),
    ("cdc_grants", "missing binlog privilege", lambda c: _scripts_with(c, "REPLICATION SLAVE, ", "")),
    ("cdc_grants", "grant option", lambda c: _scripts_with(c, "TO 'cdc'@'%';", "TO 'cdc'@'%' WITH GRANT OPTION;")),
    ("init_script_env", "script reads a variable mysql does not set",
     lambda c: _del_env(c, "mysql", "CDC_PASSWORD")),
    ("shards_profile", "a shard server left out of the profile", lambda c: _pop(c, "mysql-west")),
    ("shards_profile", "a shard service outside the profile", lambda c: _pop(c, "producer-east", "profiles")),
    ("shards_profile", "a column mapping other than the demo's",
     lambda c: _set_env(c, "merge-job-shards", "CDC__ROUTES", env_of(_svc(c, "merge-job-shards"))["CDC__ROUTES"]
                        .replace("'shop_(.*)'", "'shop_0(.*)'"))),
    ("shards_profile", "a producer of the other source",
     lambda c: _cmd_replace(c, "producer-west", "west", "east")),
    ("shards_profile", "a shard database missing on its server",
     lambda c: {"shard_scripts": {"mysql-east": [(f, t.replace("shop_02", "shop_09"))
                                                 for f, t in init_scripts(c, "mysql-east")]}}),
    ("shards_profile", "a shard server with the other's server id",
     lambda c: _cmd_replace(c, "mysql-west", "--server-id=12", "--server-id=11")),
    ("shards_profile", "the pessimistic route on Spark's kafka source",
     lambda c: _set_env(c, "merge-job-shards", "CDC__SPARK__KAFKA_SOURCE", "jvm")),
    ("healthchecks", "a shard server's healthcheck without mysqladmin ping",
     lambda c: _update(c, "mysql-east", healthcheck={"test": ["CMD", "true"]})),
    ("tls", "a MySQL server that accepts plain text",
     lambda c: _update(c, "mysql", command=[f for f in command_list(_svc(c, "mysql"))
                                            if f != "--require-secure-transport=ON"])),
    ("tls", "the producer without TLS", lambda c: _set_env(c, "producer", "CDC__SOURCE__SSL__MODE", "preferred")),
    ("tls", "a shard producer without TLS",
     lambda c: _set_env(c, "producer-west", "CDC__SOURCES", env_of(_svc(c, "producer-west"))["CDC__SOURCES"]
                        .replace("ssl: {mode: required}", "ssl: {mode: disabled}"))),
    ("tls", "a PostgreSQL server without TLS",
     lambda c: _update(c, "postgres", command=["postgres"])),
    ("tls", "a PostgreSQL server that lets other hosts in without TLS",
     lambda c: _update(c, "postgres", volumes=[v for v in _svc(c, "postgres")["volumes"] if v != PG_HOSTSSL_SCRIPT])),
    ("tls", "the merge job's PostgreSQL sink without TLS",
     lambda c: _set_env(c, "merge-job", "CDC__SINKS__POSTGRES__DSN",
                        env_of(_svc(c, "merge-job"))["CDC__SINKS__POSTGRES__DSN"].replace("?sslmode=require", ""))),
    ("tls", "the shards' merge job's PostgreSQL sink with sslmode prefer",
     lambda c: _set_env(c, "merge-job-shards", "CDC__SINKS__POSTGRES__DSN",
                        env_of(_svc(c, "merge-job-shards"))["CDC__SINKS__POSTGRES__DSN"].replace("=require", "=prefer"))),
    ("service_addresses", "a source host that is not a service",
     lambda c: _set_env(c, "producer-east", "CDC__SOURCES", env_of(_svc(c, "producer-east"))["CDC__SOURCES"]
                        .replace("host: mysql-east", "host: mysql-north"))),
]


@pytest.mark.parametrize("check,what,breaker", BREAKAGES, ids=[f"{c}:{w}" for c, w, _ in BREAKAGES])
def test_check_catches_breakage(compose: dict[str, Any], check: str, what: str,
                                breaker: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    broken = copy.deepcopy(compose)
    extra = breaker(broken)
    problems = ALL_CHECKS[check](broken, **extra)
    assert problems, f"check {check!r} did not notice: {what}"


def test_every_check_has_a_breakage() -> None:
    assert {c for c, _, _ in BREAKAGES} == set(ALL_CHECKS)
