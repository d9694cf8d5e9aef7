"""netlab on a plain echo server: a process in a namespace reaches a host-loopback service
only through the bridge, and a cut stops its bytes until the heal. Root only (ip netns)."""
import errno
import socketserver
import sys
import threading
import uuid

import pytest

from lab import netlab

CLIENT = """
import socket, sys
s = socket.create_connection(("127.0.0.1", {port}), timeout=5)
s.settimeout({timeout})
s.sendall(b"ping")
try:
    print(s.recv(4).decode())
except socket.timeout:
    print("timeout")
"""


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(1024):
            self.request.sendall(data)


@pytest.mark.root
def test_a_cut_is_a_blackhole_until_healed():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ns = netlab.Namespace(f"lab-{uuid.uuid4().hex[:6]}", [port])
    try:
        def ask(timeout):
            return ns.run(sys.executable, "-c", CLIENT.format(port=port, timeout=timeout)).stdout.strip()

        assert ask(5) == "ping"
        ns.bridge.cut(port)
        assert ask(1) == "timeout"
        ns.bridge.heal(port)
        assert ask(5) == "ping"
    finally:
        ns.close()
        server.shutdown()


SOURCE_PORT = """
import socket
s = socket.socket()
try:
    s.connect(("127.0.0.1", {target}))
    print(s.getsockname()[1])
except OSError as error:
    print(error.errno)
"""


@pytest.mark.root
def test_no_outgoing_connection_takes_a_port_a_server_in_the_namespace_will_bind():
    # Leave the served port as the only ephemeral one. Unreserved, a connection takes it as its
    # source port (then fails, refused: nothing listens at 39998), and a server binding it later
    # fails with "Address already in use"; reserved, the connection finds no source port at all.
    served = 39999
    ns = netlab.Namespace(f"lab-{uuid.uuid4().hex[:6]}", [], served=[served])
    try:
        ns.run("sh", "-c", f"echo '{served} {served}' > /proc/sys/net/ipv4/ip_local_port_range")
        got = ns.run(sys.executable, "-c", SOURCE_PORT.format(target=39998)).stdout.strip()
        assert got == str(errno.EADDRNOTAVAIL), f"errno {got}: the connection took the served port"
    finally:
        ns.close()
