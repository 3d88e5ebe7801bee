"""TLS: `trainyard api --tls_cert --tls_key` serves gRPC over TLS only; the SDK and `yard`
connect with `tls=True` / `--tls` and a CA file, and fail clearly without TLS or with the
wrong CA."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import trainyard
from stack import REPO, free_port


def make_cert(directory, name):
    """A self-signed certificate for 127.0.0.1 and localhost (it is its own CA)."""
    cert, key = directory / f"{name}.pem", directory / f"{name}-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", f"/CN={name}", "-addext",
                    "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture(scope="module")
def tls_api(stack, tmp_path_factory):
    """A second api process on the stack's database, serving TLS."""
    d = tmp_path_factory.mktemp("tls")
    cert, key = make_cert(d, "trainyard-test")
    other_cert, _ = make_cert(d, "someone-else")
    port = free_port()
    log = open(d / "api.log", "wb")
    p = subprocess.Popen([stack.bin, "api", f"--grpc_listen=127.0.0.1:{port}", "--http_listen=",
                          f"--postgres_url={stack.postgres_url}",
                          f"--redis_addr=127.0.0.1:{stack.redis_port}",
                          f"--tls_cert={cert}", f"--tls_key={key}"],
                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.close()
    target = f"127.0.0.1:{port}"
    try:
        deadline = time.time() + 30
        while True:
            try:
                with trainyard.Client(target, stack.tokens["demo"], tls=True,
                                      ca_file=str(cert)) as c:
                    c.whoami()
                break
            except trainyard.errors.Unavailable:
                if time.time() > deadline or p.poll() is not None:
                    raise RuntimeError("TLS api did not start:\n" +
                                       (d / "api.log").read_text(errors="replace"))
                time.sleep(0.2)
        yield target, cert, other_cert
    finally:
        p.terminate()
        p.wait(timeout=20)


def test_sdk_over_tls(stack, tls_api):
    target, cert, _ = tls_api
    with trainyard.Client(target, stack.tokens["demo"], tls=True, ca_file=str(cert),
                          tenant="demo") as c:
        me = c.whoami()
        assert me.principal == "users/demo"
        job = c.submit({"project": "default", "queue": "tiny", "command": ["true"],
                        "resources": {"gpus": 0, "cpus": 1, "memory": "1Gi"}})
        assert c.get(job.name).name == job.name


def test_plaintext_or_wrong_ca_is_refused(stack, tls_api):
    target, cert, other_cert = tls_api
    with trainyard.Client(target, stack.tokens["demo"], timeout=3) as c:
        with pytest.raises(trainyard.errors.Unavailable):
            c.whoami()
    with trainyard.Client(target, stack.tokens["demo"], tls=True, ca_file=str(other_cert),
                          timeout=3) as c:
        with pytest.raises(trainyard.errors.Unavailable):
            c.whoami()


def test_yard_tls_flags(stack, tls_api, yard):
    target, cert, _ = tls_api
    r = yard("whoami", "--addr", target, "--tls", "--ca-file", str(cert))
    assert r.code == 0, r
    assert "users/demo" in r.out
    r = yard("whoami", "--addr", target, "--request-timeout", "3")
    assert r.code == 5, r  # unavailable: a plaintext client on a TLS port
    r = yard("whoami", "--addr", target, "--tls", "--ca-file", str(REPO / "nope.pem"))
    assert r.code == 2, r
    assert "nope.pem" in r.err


def test_half_tls_configuration_is_refused(stack, tmp_path):
    r = subprocess.run([stack.bin, "api", f"--grpc_listen=127.0.0.1:{free_port()}",
                        "--http_listen=", f"--postgres_url={stack.postgres_url}",
                        f"--redis_addr=127.0.0.1:{stack.redis_port}",
                        f"--tls_cert={tmp_path / 'missing.pem'}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r
    assert "tls_key: required when tls_cert is set" in (r.stdout + r.stderr)
