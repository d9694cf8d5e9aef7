"""Network namespaces for the fault harness: cut one consumer off from one service.

Claim: a consumer in a namespace of its own reaches Kafka and Postgres only
through a bridge the harness holds, so the harness can cut that consumer's link
to one service (the broker, say) while the other (the database) stays up, and
heal it again, without touching any other process.

How, keeping every byte on loopback: inside the namespace the consumer dials
its own 127.0.0.1:PORT, the ports settings.py names, where a relay (run in the
namespace) hands each connection over a Unix socket to the harness's bridge,
which dials the real service on the host's loopback. Unix sockets are files,
so they cross namespaces; TCP stays inside each. A cut is a blackhole: the
bridge stops moving bytes both ways, connections stay open and nothing
arrives, as on a dead link, until the heal.

Assumptions: root (ip netns); the services listen on the host's 127.0.0.1.

    python netlab.py relay --socket-dir DIR --port 59092 --port 55432   # run inside a namespace
"""
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import cli


def socket_path(directory: Path, port: int) -> Path:
    return Path(directory) / f"{port}.sock"


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: asyncio.Event | None = None):
    """Copy bytes until EOF; while `gate` is clear, hold them (the blackhole)."""
    try:
        while data := await reader.read(65536):
            if gate is not None:
                await gate.wait()
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


# --- inside the namespace ---------------------------------------------------------

async def relay(directory: Path, ports: list[int]) -> None:
    async def serve(port, reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(str(socket_path(directory, port)))
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    servers = [await asyncio.start_server(lambda r, w, p=port: serve(p, r, w), "127.0.0.1", port) for port in ports]
    print("relay ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


# --- on the host -------------------------------------------------------------------

class Bridge:
    """Unix sockets in `directory`, one per port, each forwarded to the host's 127.0.0.1:port.
    Runs its own event loop in a thread; cut(port) and heal(port) may be called from any thread."""

    def __init__(self, directory: Path, ports: list[int]):
        self.directory, self.ports = Path(directory), list(ports)
        self.loop = asyncio.new_event_loop()
        self.gates: dict[int, asyncio.Event] = {}
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        if not ready.wait(10):
            raise RuntimeError("the bridge did not start")

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def start():
            for port in self.ports:
                gate = self.gates[port] = asyncio.Event()
                gate.set()

                async def serve(reader, writer, port=port, gate=gate):
                    try:
                        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
                    except OSError:
                        writer.close()
                        return
                    await asyncio.gather(pipe(reader, up_writer, gate), pipe(up_reader, writer, gate))

                path = socket_path(self.directory, port)
                path.unlink(missing_ok=True)
                await asyncio.start_unix_server(serve, str(path))
                os.chmod(path, 0o666)

        self.loop.run_until_complete(start())
        ready.set()
        self.loop.run_forever()

    def cut(self, port: int) -> None:
        self.loop.call_soon_threadsafe(self.gates[port].clear)

    def heal(self, port: int) -> None:
        self.loop.call_soon_threadsafe(self.gates[port].set)

    def close(self) -> None:
        for port in self.ports:
            self.heal(port)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class Namespace:
    """A network namespace with its loopback up and a relay to `ports` through a Bridge.
    `prefix` runs a command inside it. close() kills what runs there and deletes it."""

    def __init__(self, name: str, ports: list[int]):
        self.name = name
        self.directory = Path(tempfile.mkdtemp(prefix=f"{name}-"))
        subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
        try:
            self.run("ip", "link", "set", "lo", "up")
            self.bridge = Bridge(self.directory, ports)
            self.relay = subprocess.Popen(
                [*self.prefix, sys.executable, __file__, "relay", "--socket-dir", str(self.directory),
                 *(arg for port in ports for arg in ("--port", str(port)))],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            line = self.relay.stdout.readline().strip()
            if line != "relay ready":
                raise RuntimeError(f"the relay in {name} did not start: {line}")
        except BaseException:
            self.close()
            raise

    @property
    def prefix(self) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.name)

    def run(self, *command: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self.prefix, *command], check=True, capture_output=True, text=True)

    def close(self) -> None:
        pids = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True, text=True).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), 9)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        if getattr(self, "bridge", None) is not None:
            self.bridge.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def main(args) -> None:
    asyncio.run(relay(Path(args.socket_dir), args.port))


def parse_args(argv=None):
    parser = cli.Parser(description="The in-namespace relay of the fault harness.")
    parser.add_argument("verb", choices=["relay"])
    parser.add_argument("--socket-dir", required=True)
    parser.add_argument("--port", type=int, action="append", required=True)
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
