"""The Postgres wire proxy the lost-commit-reply fault (lab/faults/lost_commit_reply.py) puts
between a consumer and the server: CommitReplyDropper. It declares no fault itself.

Claim: armed, it lets the next transaction that wrote commit on the server and cuts the
client's connection before the reply reaches it; everything else it forwards unchanged.

Assumptions: the client does not ask for TLS (sslmode=disable); protocol v3.
"""
import collections
import contextlib
import re
import socket
import threading

from psycopg.conninfo import make_conninfo


class CommitReplyDropper:
    """A TCP proxy in front of Postgres that, once armed, lets the next transaction that wrote
    reach the server and commit there, and cuts the client's connection before the reply
    reaches it: the indeterminate commit, landed on purpose rather than by luck.

    It reads the server's side of the wire protocol (v3: a type byte, then a length that
    counts itself). Each exchange (the messages up to and including a ReadyForQuery) that
    begins while the proxy is armed is held back until its ReadyForQuery, then forwarded,
    unless it is the one to drop: it ended with status 'I' (idle: no transaction open any
    more) and the transaction it ended changed a row (a COMMIT after an INSERT that inserted,
    or a write outside a transaction, as p's one statement is). A transaction that changed
    nothing (an inbox hit) is not dropped: its lost reply could not duplicate anything. The
    first of the connections to finish such an exchange claims the drop; the others forward
    theirs. The start of a session (authentication, up to its first ReadyForQuery) is never
    held. The client must not ask for TLS (sslmode=disable)."""

    ROW_COUNTED = ("INSERT", "UPDATE", "DELETE", "MERGE")  # tags that end in the rows they changed
    # A SELECT wrote only if its statement did (a data-modifying WITH, as p's one statement is):
    # the client's side of the wire says which, statement by statement
    # ("FOR UPDATE" is a lock, not a write: it is cut out before the search.) A function that
    # writes, called from a plain SELECT, is not seen; no consumer here does that, or COPY.
    WRITES = re.compile(rb"\b(INSERT|UPDATE|DELETE|MERGE)\b", re.IGNORECASE)
    ROW_LOCKS = re.compile(rb"\bFOR\s+(NO\s+KEY\s+UPDATE|UPDATE|KEY\s+SHARE|SHARE)\b", re.IGNORECASE)

    @classmethod
    def writes(cls, statement: bytes) -> bool:
        """Whether a statement's text asks to change rows (a data-modifying WITH included)."""
        return bool(cls.WRITES.search(cls.ROW_LOCKS.sub(b" ", statement)))

    @classmethod
    def wrote_rows(cls, tag: str, asked_to_write: bool) -> bool:
        """Whether a command changed a row: "INSERT 0 0" (an inbox hit, ON CONFLICT DO NOTHING)
        did not, so the COMMIT of a skip is not the indeterminate commit this fault is about. A
        data-modifying SELECT's rows are not counted on the wire: it counts as a write."""
        words = tag.split(" ")
        first, last = words[0], words[-1]
        if first in cls.ROW_COUNTED:
            return last.isdigit() and int(last) > 0
        return first == "SELECT" and bool(asked_to_write)

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.fired = threading.Event()
        self._claim = threading.Lock()
        self.dropped: list[str] = []  # the tags of each exchange whose reply never reached its client
        threading.Thread(target=self._accept, daemon=True).start()

    def dsn(self, dsn: str) -> str:
        return make_conninfo(dsn, host="127.0.0.1", hostaddr="127.0.0.1", port=self.port, sslmode="disable",
                             gssencmode="disable")

    def arm(self) -> None:
        with self._claim:
            self.fired.clear()
            self.armed.set()

    def disarm(self) -> None:
        with self._claim:
            self.armed.clear()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked in its thread
        self.listener.close()

    def _claim_drop(self, tags: list[str]) -> bool:
        """Whether this exchange is the armed one's to drop; only one is, across connections."""
        with self._claim:
            if not self.armed.is_set():
                return False
            self.armed.clear()
            self.dropped.append(" / ".join(tags))
            self.fired.set()
            return True

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            for sock in (client, server):  # small messages one at a time: Nagle would hold each ~40 ms
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            writes: collections.deque[bool] = collections.deque()  # per exchange the client asked for, in order
            threading.Thread(target=self._upstream, args=(client, server, writes), daemon=True).start()
            threading.Thread(target=self._downstream, args=(server, client, writes), daemon=True).start()

    def _upstream(self, client: socket.socket, server: socket.socket, writes: collections.deque) -> None:
        """Forward the client's bytes; note, for each exchange it asks for (a Query, or the
        messages up to a Sync), whether one of its statements writes. Prepared statements are
        remembered by name, since a Bind may name one parsed exchanges ago."""
        buffer, started = bytearray(), False
        prepared: dict[bytes, bool] = {}
        current = False  # the extended-protocol exchange in hand writes
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                buffer += data
                start = 0
                while True:
                    if not started:  # the startup message: a length, no type byte
                        if len(buffer) - start < 4:
                            break
                        length = int.from_bytes(buffer[start:start + 4], "big")
                        if len(buffer) - start < length:
                            break
                        start, started = start + length, True
                        continue
                    if len(buffer) - start < 5:
                        break
                    length = int.from_bytes(buffer[start + 1:start + 5], "big")
                    if len(buffer) - start < 1 + length:
                        break
                    kind, body = buffer[start:start + 1], bytes(buffer[start + 5:start + 1 + length])
                    start += 1 + length
                    if kind == b"Q":
                        writes.append(self.writes(body))
                    elif kind == b"P":  # Parse: statement name, query text
                        name, _, rest = body.partition(b"\0")
                        prepared[name] = self.writes(rest.split(b"\0", 1)[0])
                        current = current or prepared[name]
                    elif kind == b"B":  # Bind: portal name, statement name
                        statement = body.split(b"\0", 2)[1]
                        current = current or prepared.get(statement, False)
                    elif kind == b"S":
                        writes.append(current)
                        current = False
                # appended before the bytes go on: the server's ReadyForQuery can only follow them
                server.sendall(bytes(buffer[:start]))
                del buffer[:start]
        with contextlib.suppress(OSError):
            server.shutdown(socket.SHUT_WR)

    def _downstream(self, server: socket.socket, client: socket.socket, writes: collections.deque) -> None:
        buffer = bytearray()
        held: bytearray | None = None  # the exchange in hand, if it began while armed
        tags: list[str] = []
        # between: the last message was a ReadyForQuery, so the next one begins an exchange; False at
        # first, since the start of a session (its authentication) is never held
        between = session_started = False
        wrote_rows = False  # the open transaction (or the exchange in hand) changed a row
        failed = False  # the exchange in hand has had an ErrorResponse
        try:
            while data := server.recv(65536):
                buffer += data
                start = 0
                while len(buffer) - start >= 5:
                    length = int.from_bytes(buffer[start + 1:start + 5], "big")
                    if len(buffer) - start < 1 + length:
                        break
                    message = bytes(buffer[start:start + 1 + length])
                    start += 1 + length
                    kind, body = message[:1], message[5:]
                    if between:
                        between = False
                        held = bytearray() if self.armed.is_set() else None  # decided once per exchange
                    if held is not None:
                        held += message
                    else:
                        client.sendall(message)
                    if kind == b"C":  # CommandComplete: its tag, e.g. b"INSERT 0 1\0"
                        tags.append(body.rstrip(b"\0").decode(errors="replace"))
                    if kind == b"E":  # ErrorResponse: this exchange's transaction did not commit
                        failed = True
                    if kind != b"Z":
                        continue
                    # the session's first ReadyForQuery answers its start-up, not an exchange
                    asked_to_write = writes.popleft() if session_started and writes else False
                    wrote_rows = wrote_rows or any(self.wrote_rows(tag, asked_to_write) for tag in tags)
                    # 'E': the transaction failed, nothing it did will commit; an error with 'I'
                    # (a COMMIT the server refused, a failed statement outside a transaction)
                    # ended it rolled back: either way there is no commit whose reply to drop
                    if body == b"E" or failed:
                        wrote_rows = False
                    if held is not None and body == b"I" and wrote_rows and self._claim_drop(tags):
                        return  # the server has committed; the client never hears of it
                    if held is not None:
                        client.sendall(held)
                    if body == b"I":  # no transaction open any more: the next one starts clean
                        wrote_rows = False
                    held, tags, between, session_started, failed = None, [], True, True, False
                del buffer[:start]
        except OSError:
            pass
        finally:
            for sock in (client, server):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
