#!/usr/bin/env python3
"""test_tls.py - the RESP server over TLS (`walrus serve --tls-port P
--tls-cert-file F --tls-key-file F [--tls-ca-cert-file F --tls-auth-clients
yes|no|optional]`), with certificates the test makes with the openssl
command.

Cases (all by default, or name them):
  cli        redis-cli --tls --cacert: PING, SET, GET; the plain port serves too
  benchmark  redis-benchmark --tls, 2000 requests of SET and GET (and a
             pipelined run): every one answered
  large      a 3 MiB value written and read back over TLS, and 2000
             pipelined requests in one write (replies larger than a TLS
             record, input TLS holds decrypted)
  plain      a client speaking clear text on the TLS port is closed with a
             line naming TLS's reason; the server serves on
  wrongca    a client that trusts another CA refuses the server's
             certificate; the server serves on
  clientcert --tls-ca-cert-file: a client without a certificate is refused,
             one with a certificate the CA signed is served
  usage      --tls-port without a certificate, a key others may read, a
             missing file: refused at start, naming the problem
--backends N as test_server.py (0: one backend per connection).
"""
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "standby"))
import srvtest  # noqa: E402
from srvtest import Client, Server, check, eq, run_cases  # noqa: E402
import tlsrelay  # noqa: E402


class Certs:
    """A CA, the server's certificate (localhost, 127.0.0.1), a client
    certificate, and another CA nobody uses, in a private directory."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="walrus-tls-")
        self.ca = tlsrelay.make_ca(self.dir, "ca")
        self.server = tlsrelay.make_cert(self.dir, "server", self.ca)
        self.client = tlsrelay.make_cert(self.dir, "client", self.ca)
        self.other_ca = tlsrelay.make_ca(self.dir, "other-ca")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.dir, ignore_errors=True)
        return False

    def args(self, *more):
        return ["--tls-port", "0", "--tls-cert-file", self.server[0], "--tls-key-file",
                self.server[1]] + list(more)


def tls_port(s):
    for line in s.out:
        m = re.search(r"RESP over TLS on \S+ port (\d+)", line)
        if m:
            return int(m.group(1))
    raise srvtest.TestFailure(f"no TLS port announced: {s.out}")


def tls_client(port, ca, cert=None):
    """srvtest's raw client, its socket wrapped in TLS (the server's name checked)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca)
    if cert:
        ctx.load_cert_chain(*cert)
    c = Client(port=port)
    c.sock = ctx.wrap_socket(c.sock, server_hostname="localhost")
    return c


def cli(port, *args, ca, cert=None, check_ok=True):
    argv = ["redis-cli", "--tls", "--cacert", ca, "-p", str(port), "--raw"]
    if cert:
        argv += ["--cert", cert[0], "--key", cert[1]]
    r = subprocess.run(argv + list(args), capture_output=True, timeout=60)
    if check_ok:
        check(r.returncode == 0 and b"Error" not in r.stdout + r.stderr,
              f"redis-cli --tls {args}: {r.stdout!r} {r.stderr!r}")
    return r


def commands(c):
    info = c.call("INFO", "stats").decode()
    return int(info.split("total_commands_processed:")[1].split()[0])


def case_cli(walrus):
    with Certs() as certs, Server(walrus, certs.args()) as s:
        port = tls_port(s)
        eq(cli(port, "PING", ca=certs.ca[0]).stdout, b"PONG\n", "PING over TLS")
        eq(cli(port, "SET", "k", "v over tls", ca=certs.ca[0]).stdout, b"OK\n", "SET")
        eq(cli(port, "GET", "k", ca=certs.ca[0]).stdout, b"v over tls\n", "GET")
        eq(s.cli("GET", "k"), b"v over tls\n", "the plain port reads it")


def benchmark(port, ca, *more):
    r = subprocess.run(["redis-benchmark", "--tls", "--cacert", ca, "-p", str(port), "-n",
                        "2000", "-c", "8", "--csv", "-t", "set,get"] + list(more),
                       capture_output=True, timeout=120)
    out = r.stdout.decode()
    check(r.returncode == 0, f"redis-benchmark failed: {out} {r.stderr.decode()}")
    check(re.search(r'^"SET",', out, re.M) and re.search(r'^"GET",', out, re.M),
          f"redis-benchmark did not finish both tests: {out}")


def case_benchmark(walrus):
    with Certs() as certs, Server(walrus, certs.args()) as s:
        port = tls_port(s)
        with s.client() as c:
            before = commands(c)
            # A run ends only once every request has its reply.
            benchmark(port, certs.ca[0])
            benchmark(port, certs.ca[0], "-P", "16", "-d", "2000")
            check(commands(c) - before >= 4 * 2000,
                  f"{commands(c) - before} commands run for 8000 requests")


def case_large(walrus):
    with Certs() as certs, Server(walrus, certs.args()) as s:
        big = os.urandom(3 << 20)
        with tls_client(tls_port(s), certs.ca[0]) as c:
            eq(c.call("SET", "big", big), "OK", "SET of 3 MiB")
            eq(c.call("GET", "big"), big, "GET of 3 MiB")
            n = 2000
            c.send_raw(b"".join(Client.encode("SET", f"p{i}", f"v{i}") for i in range(n)) +
                       b"".join(Client.encode("GET", f"p{i}") for i in range(n)))
            replies = [c.read() for _ in range(2 * n)]
            eq(replies[:n], ["OK"] * n, "the pipelined SETs")
            eq(replies[n:], [f"v{i}".encode() for i in range(n)], "the pipelined GETs")


def case_plain(walrus):
    with Certs() as certs:
        s = Server(walrus, certs.args())
        with s:
            port = tls_port(s)
            with Client(port=port) as c:
                c.send_raw(Client.encode("PING"))
                check(c.closed(), "the server kept a clear-text client on its TLS port")
            eq(cli(port, "PING", ca=certs.ca[0]).stdout, b"PONG\n", "a TLS client after it")
        check(re.search(r"walrus serve: TLS with client 127\.0\.0\.1:\d+: .*; connection closed",
                        s.err), f"no line about the refused client: {s.err}")


def case_wrongca(walrus):
    with Certs() as certs, Server(walrus, certs.args()) as s:
        port = tls_port(s)
        r = cli(port, "PING", ca=certs.other_ca[0], check_ok=False)
        check(b"PONG" not in r.stdout, "a client trusting another CA got an answer")
        check(b"certificate verify failed" in r.stdout + r.stderr,
              f"redis-cli did not refuse the certificate: {r.stdout!r} {r.stderr!r}")
        try:
            tls_client(port, certs.other_ca[0]).close()
            raise srvtest.TestFailure("Python's TLS took a certificate of another CA")
        except ssl.SSLCertVerificationError:
            pass
        eq(cli(port, "PING", ca=certs.ca[0]).stdout, b"PONG\n", "the right CA after it")


def case_clientcert(walrus):
    with Certs() as certs:
        s = Server(walrus, certs.args("--tls-ca-cert-file", certs.ca[0]))
        with s:
            port = tls_port(s)
            check(any("(client certificates)" in line for line in s.out),
                  f"the server does not say it asks for certificates: {s.out}")
            r = cli(port, "PING", ca=certs.ca[0], check_ok=False)
            check(b"PONG" not in r.stdout, "a client without a certificate was served")
            eq(cli(port, "PING", ca=certs.ca[0], cert=certs.client).stdout, b"PONG\n",
               "a client with a certificate the CA signed")
            r = cli(port, "PING", ca=certs.ca[0], cert=certs.other_ca, check_ok=False)
            check(b"PONG" not in r.stdout, "a certificate of another CA was taken")
        check("certificate" in s.err, f"no line about the refused clients: {s.err}")


def refused(walrus, args, want):
    base = tempfile.mkdtemp(prefix="walrus-srv-")
    try:
        r = subprocess.run([walrus, "-D", os.path.join(base, "data"), "-o",
                            "create_if_missing=on", "serve", "--port", "0"] + args,
                           capture_output=True, timeout=60)
        err = r.stderr.decode()
        eq(r.returncode, 2, f"exit code of walrus serve {args} ({err})")
        check(want in err, f"walrus serve {args}: want {want!r} in {err!r}")
        check(b"ready" not in r.stdout, "it said it was ready")
    finally:
        srvtest.kill_all(base)
        shutil.rmtree(base, ignore_errors=True)


def case_usage(walrus):
    with Certs() as certs:
        crt, key = certs.server
        refused(walrus, ["--tls-port", "0"], "--tls-port needs --tls-cert-file and --tls-key-file")
        refused(walrus, ["--tls-cert-file", crt, "--tls-key-file", key], "need --tls-port")
        refused(walrus, certs.args("--tls-auth-clients", "yes"), "needs --tls-ca-cert-file")
        refused(walrus, ["--tls-port", "0", "--tls-cert-file", crt + ".missing",
                         "--tls-key-file", key], crt + ".missing")
        os.chmod(key, 0o640)
        refused(walrus, certs.args(), "may be read by others (mode 0640)")
        os.chmod(key, 0o600)
        refused(walrus, ["--tls-port", "0", "--tls-cert-file", crt, "--tls-key-file",
                         certs.client[1]], "does not match the certificate")


CASES = {
    "cli": case_cli,
    "benchmark": case_benchmark,
    "large": case_large,
    "plain": case_plain,
    "wrongca": case_wrongca,
    "clientcert": case_clientcert,
    "usage": case_usage,
}

if __name__ == "__main__":
    sys.exit(run_cases(CASES, sys.argv[1:]))
