#!/usr/bin/env python3
"""Streaming replication over TLS (ssl = on on the primary, sslmode on the
standby), certificates made by the test with the openssl command:

- a standby made in one command (base backup) with sslmode = verify-full
  streams and replays; one with sslmode = disable is refused, saying the
  primary requires TLS;
- a relay that forwards the bytes (the standby now connects through it)
  never sees the WAL in clear: a marker written on the primary is in the
  primary's WAL files, not in what the relay carried;
- the relay flips a byte going to the standby: the connection breaks with
  a TLS error in the standby's log, and the standby reconnects and catches
  up; it injects a FEEDBACK claiming 2^62 flushed going to the primary: the
  sender drops the connection with a TLS error and the primary's
  synchronous standby position (sync_standby_lsn) does not move;
- a relay that terminates TLS itself with its own certificate is refused
  by verify-full and verify-ca (the certificate) and, with sslmode = require (no
  certificate check), by the handshake's channel binding: the primary
  answers "authentication failed", as the proofs cover each side's own
  TLS session;
- a primary with ssl_ca_file refuses a standby without a client
  certificate and takes one with a certificate its CA signed."""
import os, struct

import sb
import tlsrelay
import wtest
from wtest import check, log

OPTS = ["wal_segment_size=1MB", "min_wal_size=2MB", "max_wal_size=4MB"]
MARKER = "tls-marker-f7c1"


def primary_conf(port, cert, extra="", sync=True):
    """The primary's walrus.conf: TLS on 127.0.0.1:PORT; its durable commits
    wait for the standby named "standby" when SYNC."""
    return (f"listen_replication = '127.0.0.1:{port}'\nreplication_password = 'secret'\n"
            f"ssl = on\nssl_cert_file = '{cert[0]}'\nssl_key_file = '{cert[1]}'\n"
            + ("synchronous_standby = 'standby'\n" if sync else "") + extra)


def write(p, tag, n=20):
    lines = "".join(f"{tag}{i:04d}\tvalue-{tag}-{i}\n" for i in range(n))
    sb.must(p.run("load", "--sync", input=lines.encode()), f"load {tag}")


def caught_up(p, s, timeout=60):
    target = sb.lsn(sb.stats(p)["wal"]["flush_lsn"])
    sb.wait_replayed(s, target, timeout)
    check(sb.scan(s) == sb.scan(p), "the standby's data differ from the primary's")


def base_backup(exe, root, name, primary, *args):
    """`walrus standby --primary PRIMARY ARGS` on a new directory ROOT/NAME,
    expected to fail: its stderr."""
    w = wtest.Walrus(exe, os.path.join(root, name), OPTS)
    r = w.run("standby", "--primary", primary, *args, timeout=60)
    check(r.returncode != 0, f"the base backup of {name} through {primary} succeeded")
    check(not os.path.exists(w.dir), f"{w.dir} was left behind")
    err = r.stderr.decode(errors="replace")
    log("  refused: " + err.strip().splitlines()[-1])
    return err


def wal_has(p, data):
    wal = os.path.join(p.dir, "wal")
    for name in os.listdir(wal):
        with open(os.path.join(wal, name), "rb") as f:
            if data in f.read():
                return True
    return False


def receiver_log(s, pattern):
    return sb.log_matches(s, r"walrus-wrcv LOG:  replication from .* stopped: " + pattern)


def through_relay(p, s, st, port, ca):
    """The standby streams through a forwarding relay: no WAL in clear; a
    flipped byte or an injected message breaks the connection.  Returns
    the standby, running."""
    relay = tlsrelay.Relay(port)
    try:
        st.stop()
        st = sb.Standby(s, ["--primary", f"127.0.0.1:{relay.port}", "--sslmode", "verify-full",
                            "--sslrootcert", ca[0]])
        st.start()
        write(p, MARKER)
        caught_up(p, s)
        check(wal_has(p, MARKER.encode()), "the marker is not in the primary's WAL in clear")
        with relay.lock:
            down, up = bytes(relay.down), bytes(relay.up)
        check(b"WRRP" in down, "the relay did not carry the replication connection")
        check(MARKER.encode() not in down + up, "the relay saw WAL in clear")

        log("a byte flipped on its way to the standby")
        with relay.lock:
            relay.flip_down = True
        write(p, "flip", 5)
        check(relay.flipped.wait(30), "the relay had nothing to flip")
        check(wtest.wait_for(lambda: receiver_log(s, r".*TLS read failed"), 30),
              "the standby did not report the broken record:\n" + s.log_tail())
        caught_up(p, s)

        log("a FEEDBACK injected on its way to the primary")
        def confirmed():
            w = sb.stats(p)["wal"]
            return w if sb.lsn(w["sync_standby_lsn"]) == sb.lsn(w["flush_lsn"]) else None
        before = wtest.wait_for(confirmed, 30)
        check(before, f"the synchronous standby did not confirm: {sb.stats(p)['wal']}")
        feedback = struct.pack("<BIQQQQ", 8, 32, 1 << 62, 1 << 62, 1 << 62, 0)
        with relay.lock:
            relay.inject_up = feedback
        check(relay.injected.wait(30), "the standby sent nothing to inject before")
        check(wtest.wait_for(lambda: sb.log_matches(
            p, r"walrus-wsnd WARNING:  replication connection from .*standby.* dropped: "
               r".*TLS read failed"), 30),
              "the primary did not drop the connection:\n" + p.log_tail())
        after = sb.stats(p)["wal"]
        check(after["sync_standby_lsn"] == before["sync_standby_lsn"],
              f"the synchronous standby position moved: {before} -> {after}")
        write(p, "after", 5)  # durable commits wait for the standby again: it reconnects
        caught_up(p, s)
        check(relay.connections >= 3, f"the standby connected {relay.connections} times")
        return st
    finally:
        relay.close()


def terminating_relay(exe, root, port, ca, rogue):
    relay = tlsrelay.TlsRelay(port, *rogue)
    try:
        addr = f"127.0.0.1:{relay.port}"
        err = base_backup(exe, root, "mitm-full", addr, "--sslmode", "verify-full",
                          "--sslrootcert", ca[0])
        check("certificate verify failed" in err, "verify-full took the relay's certificate: "
              + err)
        err = base_backup(exe, root, "mitm-ca", addr, "--sslmode", "verify-ca",
                          "--sslrootcert", ca[0])
        check("certificate verify failed" in err, "verify-ca took the relay's certificate: "
              + err)
        err = base_backup(exe, root, "mitm-require", addr, "--sslmode", "require")
        check(relay.sessions >= 1, f"the relay did not get TLS on both sides: {relay.errors}")
        check("authentication failed" in err,
              "the primary took a proof made for another TLS session: " + err)
    finally:
        relay.close()


def client_certificates(cleanup, exe, root, p, port, ca, srv):
    """ssl_ca_file: a standby without a certificate its CA signed is refused."""
    sb.must(p.run("stop", "--wait"), "stop the primary")
    check(p.wait_serve_exit(30) == 0, "the primary's walrus serve did not exit cleanly")
    sb.write_conf(p.dir, primary_conf(port, srv, f"ssl_ca_file = '{ca[0]}'\n", sync=False))
    p.serve()
    addr = f"localhost:{port}"
    err = base_backup(exe, root, "no-cert", addr, "--sslmode", "verify-full",
                      "--sslrootcert", ca[0])
    check("certificate required" in err, "a standby without a certificate was taken: " + err)
    cert = tlsrelay.make_cert(os.path.dirname(ca[0]), "standby-client", ca)
    w = wtest.Walrus(exe, os.path.join(root, "with-cert"), OPTS)
    w.register(cleanup)
    st = sb.Standby(w, ["--primary", addr, "--sslmode", "verify-full", "--sslrootcert", ca[0],
                        "--sslcert", cert[0], "--sslkey", cert[1]])
    st.start()
    write(p, "c")
    caught_up(p, w)
    st.stop()


def main(cleanup):
    exe, root = sb.setup(cleanup, "tls")
    certs = os.path.join(root, "certs")
    os.mkdir(certs, 0o700)
    ca = tlsrelay.make_ca(certs, "ca")
    srv = tlsrelay.make_cert(certs, "primary", ca)
    rogue = tlsrelay.make_cert(certs, "rogue", tlsrelay.make_ca(certs, "rogue-ca"))
    port = tlsrelay.free_port()
    pdir = os.path.join(root, "primary")
    sb.write_conf(pdir, primary_conf(port, srv, sync=False))
    p = wtest.Walrus(exe, pdir, OPTS)
    p.register(cleanup)
    p.create()  # a durable put: before its commits wait for the standby
    sb.write_conf(pdir, primary_conf(port, srv))
    p.serve()
    os.environ["WALRUS_REPLICATION_PASSWORD"] = "secret"

    log("a standby in one command over TLS, sslmode = verify-full")
    s = wtest.Walrus(exe, os.path.join(root, "standby"), OPTS)
    s.register(cleanup)
    st = sb.Standby(s, ["--primary", f"localhost:{port}", "--sslmode", "verify-full",
                        "--sslrootcert", ca[0]])
    st.start()
    write(p, "a")
    caught_up(p, s)
    check(sb.log_matches(p, r"listening for standbys on 127\.0\.0\.1:\d+ \(TLS\)"),
          "the primary does not say it serves TLS")

    log("sslmode = disable against a primary with ssl = on")
    err = base_backup(exe, root, "plain", f"localhost:{port}", "--sslmode", "disable")
    check("requires TLS (ssl = on there)" in err, "no clear refusal: " + err)

    log("a relay forwarding the bytes")
    st = through_relay(p, s, st, port, ca)

    log("a relay terminating TLS with its own certificate")
    terminating_relay(exe, root, port, ca, rogue)
    st.stop()

    log("client certificates (ssl_ca_file)")
    client_certificates(cleanup, exe, root, p, port, ca, srv)
    return 0


if __name__ == "__main__":
    wtest.guarded(main)
