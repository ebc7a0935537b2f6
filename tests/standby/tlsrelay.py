"""What the TLS tests share (tests/standby, tests/server): certificates made
with the `openssl` command in the test's directory, and relays that sit
between a standby and its primary as an attacker on the network would.
No dependency on either suite's harness: both import it."""
import os, socket, ssl, subprocess, threading

KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(args, what):
    r = subprocess.run(["openssl"] + args, capture_output=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {what}: {r.stderr.decode(errors='replace')[-400:]}")


def make_ca(d, name):
    """A self-signed CA in D: (certificate path, key path)."""
    crt, key = os.path.join(d, name + ".crt"), os.path.join(d, name + ".key")
    _openssl(["req", "-x509"] + KEY + ["-keyout", key, "-out", crt, "-days", "2",
                                        "-subj", f"/CN={name}"], "CA " + name)
    os.chmod(key, 0o600)
    return crt, key


def make_cert(d, name, ca, san="DNS:localhost,IP:127.0.0.1"):
    """A certificate for NAME signed by CA ((crt, key)), valid for SAN: (crt, key)."""
    crt, key = os.path.join(d, name + ".crt"), os.path.join(d, name + ".key")
    csr, ext = os.path.join(d, name + ".csr"), os.path.join(d, name + ".ext")
    with open(ext, "w") as f:
        f.write(f"subjectAltName={san}\n")
    _openssl(["req"] + KEY + ["-keyout", key, "-out", csr, "-subj", f"/CN={name}"],
             "request " + name)
    _openssl(["x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
              "-out", crt, "-days", "2", "-extfile", ext], "certificate " + name)
    os.chmod(key, 0o600)
    return crt, key


def free_port():
    """A TCP port free right now (bound to port 0, read back, released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _close(*socks):
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


class Relay:
    """A TCP forwarder to 127.0.0.1:TARGET, one connection after another,
    keeping every byte it carries (down: to the standby, up: to the
    primary).  On request it flips the last byte of the next chunk it
    carries down, or sends bytes of its own up before the next chunk."""

    def __init__(self, target):
        self.target = target
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.down, self.up = bytearray(), bytearray()
        self.lock = threading.Lock()
        self.flip_down, self.inject_up = False, None
        self.flipped, self.injected = threading.Event(), threading.Event()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        _close(self.lsock)

    def _accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            try:
                p = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                _close(c)
                continue
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._pump, args=(c, p, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(p, c, True), daemon=True).start()

    def _tamper(self, data, down):
        with self.lock:
            if down and self.flip_down:
                self.flip_down = False
                self.flipped.set()
                return data[:-1] + bytes([data[-1] ^ 0x55])
            if not down and self.inject_up is not None:
                data, self.inject_up = self.inject_up + data, None
                self.injected.set()
        return data

    def _pump(self, src, dst, down):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                data = self._tamper(data, down)
                with self.lock:
                    (self.down if down else self.up).extend(data)
                dst.sendall(data)
        except OSError:
            pass
        _close(src, dst)


class TlsRelay:
    """A relay that terminates TLS on both sides with its own certificate
    (CERT, KEY): it passes the primary's CHALLENGE (in clear) to the
    standby, then runs TLS as a server toward the standby and as a client
    toward the primary, and forwards what each side sends in clear."""

    def __init__(self, target, cert, key):
        self.target = target
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.server.load_cert_chain(cert, key)
        self.client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.client.check_hostname = False
        self.client.verify_mode = ssl.CERT_NONE
        self.sessions = 0  # connections where both TLS handshakes succeeded
        self.errors = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        _close(self.lsock)

    def _accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c):
        p = None
        try:
            p = socket.create_connection(("127.0.0.1", self.target))
            hello = b""
            while len(hello) < 5 + 64:  # the CHALLENGE: header and payload
                more = p.recv(5 + 64 - len(hello))
                if not more:
                    raise OSError("the primary closed before its CHALLENGE")
                hello += more
            c.sendall(hello)
            cs = self.server.wrap_socket(c, server_side=True)
            ps = self.client.wrap_socket(p)
            self.sessions += 1
        except (OSError, ssl.SSLError) as e:
            self.errors.append(str(e))
            _close(c, *([p] if p else []))
            return
        threading.Thread(target=self._pump, args=(cs, ps), daemon=True).start()
        self._pump(ps, cs)

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except (OSError, ssl.SSLError):
            pass
        _close(src, dst)
