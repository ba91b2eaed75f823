"""Small helpers the Python benches share (each bench runs as bench/NAME.py, so
this directory is on sys.path)."""
import socket
import urllib.request


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def metrics(port):
    """The agent's /metrics text on 127.0.0.1:port ("" when it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.read().decode()
    except OSError:
        return ""
