"""A payment provider of the repo's own: a real HTTP service on loopback that records
every charge it performs in its own Postgres table.

Claim: it behaves like the providers the post names, in three modes:

    keys    a repeated Idempotency-Key returns the first response and charges
            nothing more, as Stripe does; a request whose key is still in
            flight waits for the first one and gets its answer (Stripe says 409)
    lookup  keys are ignored, but GET /charges?reference=R says whether a
            charge for R landed, as Postmark's metadata and webhooks allow
    none    neither: every POST is a new charge

Assumptions: PROVIDER_DSN (settings.py) names the database; the provider keeps
its tables in the schema the DSN's search_path picks (the harness gives it one
per run), so its charges are counted apart from the consumer's own tables.

    python -m variants.provider --mode keys --port 0     # prints: provider listening on http://127.0.0.1:PORT
"""
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg

from variants import common

PROVIDER_DSN = common.role_dsn("inbox_provider", "PROVIDER_DSN")

MODES = ("keys", "lookup", "none")
SCHEMA = """
CREATE TABLE IF NOT EXISTS provider_charges (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    reference       text   NOT NULL,   -- the caller's own reference (the event ID)
    account_id      integer NOT NULL,
    amount          bigint NOT NULL,
    idempotency_key text,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS provider_charges_reference ON provider_charges (reference);
CREATE TABLE IF NOT EXISTS provider_keys (
    idempotency_key text PRIMARY KEY,
    response        jsonb             -- set in the same transaction as the key's row, so never seen NULL
);
"""


CHARGE_LIMIT = 1_000_000_000  # a per-charge limit, as real providers have: above it the charge is refused


class ProviderError(Exception):
    """The provider answered with an error status (`status`), or not at all (`status` None)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status

    @property
    def refused(self) -> bool:
        """A 4xx: the provider will refuse this request however often it comes (poison); a 5xx
        or no answer may pass next time."""
        return self.status is not None and 400 <= self.status < 500


def charge_once(conn: psycopg.Connection, mode: str, key: str | None, body: dict) -> tuple[int, dict]:
    """Perform (or, for a known key, replay) one charge; (HTTP status, response body)."""
    def charge() -> dict:
        charge_id = conn.execute(
            "INSERT INTO provider_charges (reference, account_id, amount, idempotency_key) "
            "VALUES (%s, %s, %s, %s) RETURNING id",
            (body["reference"], body["account_id"], body["amount"], key)).fetchone()[0]
        return {"charge_id": charge_id, "reference": body["reference"]}

    if mode != "keys" or not key:
        with conn.transaction():
            return 200, charge()
    with conn.transaction():
        # A second request with a key in flight blocks on this insert until the first one
        # commits (key, charge and response together), then reads the stored response.
        first = conn.execute("INSERT INTO provider_keys (idempotency_key) VALUES (%s) ON CONFLICT DO NOTHING "
                             "RETURNING 1", (key,)).fetchone()
        if first is None:
            stored = conn.execute("SELECT response FROM provider_keys WHERE idempotency_key = %s", (key,)).fetchone()
            return 200, {**stored[0], "replayed": True}
        response = charge()
        conn.execute("UPDATE provider_keys SET response = %s WHERE idempotency_key = %s",
                     (json.dumps(response), key))
    return 200, response


class Handler(BaseHTTPRequestHandler):
    mode = "keys"
    dsn = PROVIDER_DSN
    local = threading.local()

    def conn(self) -> psycopg.Connection:
        if getattr(self.local, "conn", None) is None or self.local.conn.closed:
            self.local.conn = psycopg.connect(self.dsn, autocommit=True)
        return self.local.conn

    def reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        if self.path != "/charges":
            return self.reply(404, {"error": "no such endpoint"})
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if body["amount"] > CHARGE_LIMIT:
                return self.reply(422, {"error": f"amount {body['amount']} is over the per-charge limit "
                                                 f"of {CHARGE_LIMIT}"})
            status, response = charge_once(self.conn(), self.mode, self.headers.get("Idempotency-Key"), body)
        except (ValueError, KeyError) as e:
            return self.reply(400, {"error": f"bad request: {e}"})
        self.reply(status, response)

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        if url.path != "/charges":
            return self.reply(404, {"error": "no such endpoint"})
        if self.mode != "lookup":
            return self.reply(404, {"error": f"no status lookup in mode {self.mode}"})
        reference = urllib.parse.parse_qs(url.query).get("reference", [""])[0]
        rows = self.conn().execute("SELECT id FROM provider_charges WHERE reference = %s ORDER BY id",
                                   (reference,)).fetchall()
        self.reply(200, {"reference": reference, "charges": [r[0] for r in rows]})

    def log_message(self, *args):  # one line per request is noise at thousands of charges
        pass


class Client:
    """What a consumer uses to call the provider: charge(), and find() where the mode has a lookup."""

    def __init__(self, base_url: str, timeout_s: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def _request(self, request, timeout_s: float | None = None) -> dict:
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            raise ProviderError(f"{e.code}: {e.read().decode(errors='replace')}", e.code) from None
        except (urllib.error.URLError, TimeoutError) as e:
            raise ProviderError(f"provider unreachable: {e}") from None

    def charge(self, reference: str, account_id: int, amount: int, key: str | None = None,
               timeout_s: float | None = None) -> dict:
        headers = {"Content-Type": "application/json", **({"Idempotency-Key": key} if key else {})}
        body = json.dumps({"reference": reference, "account_id": account_id, "amount": amount}).encode()
        return self._request(urllib.request.Request(f"{self.base_url}/charges", data=body, headers=headers),
                             timeout_s)

    def find(self, reference: str, timeout_s: float | None = None) -> list[int]:
        """Charge IDs that landed for `reference` (lookup mode only)."""
        query = urllib.parse.urlencode({"reference": reference})
        return self._request(urllib.request.Request(f"{self.base_url}/charges?{query}"), timeout_s)["charges"]


class Running:
    """provider.py as a subprocess on a free loopback port, for tests and harnesses."""

    def __init__(self, mode: str, dsn: str, timeout_s: float = 30.0):
        import os

        self.proc = subprocess.Popen([sys.executable, "-m", "variants.provider", "--mode", mode, "--port", "0"],
                                     cwd=Path(__file__).resolve().parents[1],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=dict(os.environ, PROVIDER_DSN=dsn))
        line = self._first_line(timeout_s)
        if not line.startswith("provider listening on "):
            self.proc.kill()
            raise RuntimeError(f"the provider did not start: {line}")
        self.url = line.split()[-1]

    def _first_line(self, timeout_s: float) -> str:
        lines = []
        reader = threading.Thread(target=lambda: lines.append(self.proc.stdout.readline().strip()), daemon=True)
        reader.start()
        reader.join(timeout_s)
        return lines[0] if lines else f"no output within {timeout_s:g}s"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def main(args) -> None:
    with psycopg.connect(PROVIDER_DSN, autocommit=True) as conn:
        # Made by the schema's owner (harness.create_schema) where they can be; on a server where
        # this role may create tables, it makes them itself.
        if conn.execute("SELECT to_regclass('provider_charges') IS NULL OR to_regclass('provider_keys') IS NULL"
                        ).fetchone()[0]:
            conn.execute(SCHEMA)
    Handler.mode = args.mode
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"provider listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


def parse_args(argv=None):
    parser = common.Parser(description="A payment provider on loopback that records every charge in Postgres.")
    parser.add_argument("--mode", choices=MODES, default="keys")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    return parser.parse_args(argv)


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    main(parse_args())
