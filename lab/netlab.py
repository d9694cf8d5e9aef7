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

    python -m lab.netlab relay --socket-dir DIR --port 59092 --port 55432   # run inside a namespace
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

from lab import cli


def socket_path(directory: Path, port: int, served: bool = False) -> Path:
    """Where a port's connections cross: out of the namespace (`port`.sock, the bridge listens),
    or into it, to a server running inside (`served-port`.sock, the relay listens)."""
    return Path(directory) / (f"served-{port}.sock" if served else f"{port}.sock")


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


async def splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dial, gate: asyncio.Event | None = None):
    """Dial the other end (`dial()`, an open_connection coroutine) and copy both ways through
    `gate`; if nothing answers there, close the connection that came in."""
    try:
        up_reader, up_writer = await dial()
    except OSError:
        writer.close()
        return
    await asyncio.gather(pipe(reader, up_writer, gate), pipe(up_reader, writer, gate))


# --- inside the namespace ---------------------------------------------------------

async def relay(directory: Path, ports: list[int], served: list[int] = ()) -> None:
    def serve(port):  # out to the bridge, which dials the host's service
        return lambda r, w: splice(r, w, lambda: asyncio.open_unix_connection(str(socket_path(directory, port))))

    def serve_inside(port):  # a connection from the host to a server in here (a broker): dial it on this loopback
        return lambda r, w: splice(r, w, lambda: asyncio.open_connection("127.0.0.1", port))

    servers = [await asyncio.start_server(serve(port), "127.0.0.1", port) for port in ports]
    for port in served:
        path = socket_path(directory, port, served=True)
        path.unlink(missing_ok=True)
        servers.append(await asyncio.start_unix_server(serve_inside(port), str(path)))
        os.chmod(path, 0o666)
    print("relay ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


# --- on the host -------------------------------------------------------------------

class Bridge:
    """Unix sockets in `directory`, one per port, each forwarded to the host's 127.0.0.1:port.
    Runs its own event loop in a thread; cut(port) and heal(port) may be called from any thread."""

    def __init__(self, directory: Path, ports: list[int], served: list[int] = ()):
        """`ports`: services on the host that the namespace may reach; `served`: ports of a
        server inside the namespace, which the bridge listens on, on the host's loopback."""
        self.directory, self.ports, self.served = Path(directory), list(ports), list(served)
        self.servers = []
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
            for port in self.ports:  # a service on the host, dialled on its loopback
                gate = self.gates[port] = asyncio.Event()
                gate.set()
                path = socket_path(self.directory, port)
                path.unlink(missing_ok=True)
                self.servers.append(await asyncio.start_unix_server(
                    lambda r, w, port=port, gate=gate: splice(r, w, lambda: asyncio.open_connection("127.0.0.1", port),
                                                              gate), str(path)))
                os.chmod(path, 0o666)
            for port in self.served:  # a server inside the namespace, through the relay's socket
                gate = self.gates[port] = asyncio.Event()
                gate.set()
                inside = str(socket_path(self.directory, port, served=True))
                self.servers.append(await asyncio.start_server(
                    lambda r, w, inside=inside, gate=gate: splice(r, w, lambda: asyncio.open_unix_connection(inside),
                                                                  gate), "127.0.0.1", port))

        self.loop.run_until_complete(start())
        ready.set()
        self.loop.run_forever()

    def cut(self, port: int) -> None:
        self.loop.call_soon_threadsafe(self.gates[port].clear)

    def heal(self, port: int) -> None:
        self.loop.call_soon_threadsafe(self.gates[port].set)

    def cut_all(self) -> None:
        for port in self.gates:
            self.cut(port)

    def heal_all(self) -> None:
        for port in self.gates:
            self.heal(port)

    def close(self) -> None:
        """Heal every link and stop listening (a served port is then free for its server again)."""
        for port in self.gates:
            self.heal(port)
        for server in self.servers:
            self.loop.call_soon_threadsafe(server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class Namespace:
    """A network namespace with its loopback up and a relay to `ports` through a Bridge.
    `prefix` runs a command inside it. close() kills what runs there and deletes it."""

    def __init__(self, name: str, ports: list[int], served: list[int] = ()):
        self.name = name
        self.directory = Path(tempfile.mkdtemp(prefix=f"{name}-"))
        subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
        try:
            self.run("ip", "link", "set", "lo", "up")
            # Every port named here is one a process in here listens on (the relay's, or a server's
            # started later). Outgoing connections take their source port from the ephemeral range,
            # which holds them all (32768-60999): a broker's own outgoing connection took the port
            # its listener was about to bind. Reserved ports are never handed out as source ports.
            reserved = ",".join(str(port) for port in sorted({*ports, *served}))
            if reserved:
                self.run("sh", "-c", f"echo {reserved} > /proc/sys/net/ipv4/ip_local_reserved_ports")
            self.bridge = Bridge(self.directory, ports, served)
            self.relay = subprocess.Popen(
                [*self.prefix, sys.executable, "-m", "lab.netlab", "relay", "--socket-dir", str(self.directory),
                 *(arg for port in ports for arg in ("--port", str(port))),
                 *(arg for port in served for arg in ("--serve", str(port)))],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=Path(__file__).resolve().parents[1])
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
    asyncio.run(relay(Path(args.socket_dir), args.port or [], args.serve or []))


def parse_args(argv=None):
    parser = cli.Parser(description="The in-namespace relay of the fault harness.")
    parser.add_argument("verb", choices=["relay"])
    parser.add_argument("--socket-dir", required=True)
    parser.add_argument("--port", type=int, action="append", help="a host service the namespace may reach")
    parser.add_argument("--serve", type=int, action="append", help="a port of a server inside the namespace")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
