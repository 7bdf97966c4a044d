"""A stand-in for Confluent Schema Registry: the REST calls the framing makes, over HTTP or
HTTPS, with basic auth and answers that fail on purpose.

No Schema Registry server can run here (Confluent's is Java, from Maven Central or Docker;
karapace is not on PyPI), so the registry path is tested against this: the same endpoints
and JSON as Confluent's API (``POST /subjects/{subject}/versions`` -> ``{"id"}``, the same
schema under any subject keeps its id; ``GET /schemas/ids/{id}`` -> ``{"schema"}``;
``GET /schemas/ids/{id}/subjects``; ``GET /subjects/{subject}/versions/latest``; errors as
``{"error_code", "message"}``), spoken to by confluent-kafka's own client.  What it does not
do (compatibility checks, references, contexts, modes) the framing never asks for.
"""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def self_signed_cert(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """A self-signed certificate for ``host`` and its key, as PEM files in ``directory``."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "registry.crt", directory / "registry.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class StandInRegistry:
    """The registry on ``127.0.0.1:<free port>`` in a thread: ``user_info`` (``user:password``)
    required when given, TLS with ``tls`` (certificate, key), the first ``fail_first``
    requests answered 503 (a retriable error)."""

    def __init__(self, *, user_info: str | None = None, tls: tuple[Path, Path] | None = None,
                 fail_first: int = 0) -> None:
        self.schemas: list[str] = []  # id - 1 -> schema text
        self.subjects: dict[str, list[int]] = {}
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status)
        self.fail_left = fail_first
        self._lock = threading.Lock()
        registry = self
        expected = "Basic " + base64.b64encode(user_info.encode()).decode() if user_info else None

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, doc: dict) -> None:
                body = json.dumps(doc).encode()
                registry.requests.append((self.command, self.path, status))
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _refused(self) -> bool:
                if expected is not None and self.headers.get("Authorization") != expected:
                    self._answer(401, {"error_code": 401, "message": "Unauthorized"})
                    return True
                with registry._lock:
                    if registry.fail_left > 0:
                        registry.fail_left -= 1
                        self._answer(503, {"error_code": 50003, "message": "Service unavailable (on purpose)"})
                        return True
                return False

            def do_POST(self):  # noqa: N802
                if self._refused():
                    return
                path = urllib.parse.urlsplit(self.path).path.strip("/").split("/")
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if len(path) != 3 or path[0] != "subjects" or path[2] != "versions" or "schema" not in body:
                    self._answer(404, {"error_code": 404, "message": "not found"})
                    return
                subject = urllib.parse.unquote(path[1])
                self._answer(200, registry.register(subject, body["schema"]))

            def do_GET(self):  # noqa: N802
                if self._refused():
                    return
                path = urllib.parse.urlsplit(self.path).path.strip("/").split("/")
                known = len(path) >= 3 and path[:2] == ["schemas", "ids"] and path[2].isdigit() \
                    and 0 < int(path[2]) <= len(registry.schemas)
                if known and len(path) == 3:
                    self._answer(200, {"schema": registry.schemas[int(path[2]) - 1]})
                elif known and path[3:] == ["subjects"]:
                    self._answer(200, sorted(s for s, ids in registry.subjects.items() if int(path[2]) in ids))
                elif len(path) == 4 and path[0] == "subjects" and path[2:] == ["versions", "latest"] \
                        and urllib.parse.unquote(path[1]) in registry.subjects:
                    subject = urllib.parse.unquote(path[1])
                    sid = registry.subjects[subject][-1]
                    self._answer(200, {"subject": subject, "id": sid, "version": len(registry.subjects[subject]),
                                       "schema": registry.schemas[sid - 1]})
                else:
                    self._answer(404, {"error_code": 40403, "message": "Schema not found"})

            def log_message(self, *args):  # quiet
                pass
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.scheme = "http"
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(tls[0]), str(tls[1]))
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.url = f"{self.scheme}://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True, name="stand-in-registry").start()

    def register(self, subject: str, schema: str) -> dict:
        """Confluent's answer to a registration: the schema's id (one per distinct schema)."""
        canonical = json.dumps(json.loads(schema), sort_keys=True)
        with self._lock:
            known = [i for i, s in enumerate(self.schemas, 1) if json.dumps(json.loads(s), sort_keys=True) == canonical]
            sid = known[0] if known else len(self.schemas) + 1
            if not known:
                self.schemas.append(schema)
            versions = self.subjects.setdefault(subject, [])
            if sid not in versions:
                versions.append(sid)
        return {"id": sid, "subject": subject, "version": versions.index(sid) + 1, "schema": schema}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "StandInRegistry":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
