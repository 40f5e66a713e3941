"""A real HTTP server on 127.0.0.1 serving a folder: the download tests' stand-in for a public host."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any


@dataclass
class FileServer:
    """Serves ``root`` at ``url``; ``requests`` logs every GET path."""

    root: Path
    url: str
    requests: list[str] = field(default_factory=list)

    def put(self, name: str, content: bytes) -> tuple[str, str]:
        """Serve ``content`` as ``name``; returns its URL and SHA-256."""
        (self.root / name).write_bytes(content)
        return f"{self.url}/{name}", hashlib.sha256(content).hexdigest()


@contextmanager
def serve_files(root: Path) -> Iterator[FileServer]:
    """Serve the folder ``root`` (created if needed) until the block ends."""
    root.mkdir(parents=True, exist_ok=True)
    log: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            log.append(self.path)
            super().do_GET()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield FileServer(root=root, url=f"http://127.0.0.1:{httpd.server_address[1]}", requests=log)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
