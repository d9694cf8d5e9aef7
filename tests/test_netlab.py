"""netlab on a plain echo server: a process in a namespace reaches a host-loopback service
only through the bridge, and a cut stops its bytes until the heal. Root only (ip netns)."""
import socketserver
import sys
import threading
import uuid

import pytest

import netlab

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
