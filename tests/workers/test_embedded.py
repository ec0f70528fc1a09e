"""The embedded default (`make run` → `netsynth run`): SQLite, a filesystem broker, a worker for jobs and one for
explanations under ./var."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnxruntime as ort

from tests.datasets import png_bytes
from tests.workers.conftest import Digits
from tests.workers.service import ROOT, free_port, wait_for

V1 = "/api/v1"
JOB_WAIT_S = 480
"""How long the test waits for its 60 s job: past the task's hard time limit (186 s) and a restarted attempt's,
as a slow, loaded machine (CI's 2 cores shared with another test process) once took over 240 s; what the job
did by then is in the failure message."""
KEY = re.compile(r"local admin (\S+): API key \(shown once, store it now\): (\S+)")


class Embedded:
    """`netsynth run` started in `folder` (its ./var lives there) with no NETSYNTH_ settings in the environment."""

    def __init__(self, folder: Path, log_name: str) -> None:
        self.port, self.folder = free_port(), folder
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = folder / log_name
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NETSYNTH_", "XLA_"))}
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = str(ROOT)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "api.cli", "run", "--port", str(self.port)],
                                         cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_up(self) -> None:
        def up() -> bool:
            assert self.proc.poll() is None, self.log()
            try:
                return httpx.get(f"{self.url}{V1}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 120, "the embedded service")
        wait_for(lambda: self.log().count(" ready.") >= 2, 120, "its two workers (jobs, explanations)")

    def ctrl_c(self) -> int:
        """Send SIGINT to the foreground process group, as Ctrl-C in a terminal does, and wait for the exit."""
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.proc.wait(timeout=90)


def _processes_in(folder: Path) -> list[int]:
    """Processes whose working directory is `folder` (what is left of the service after it stops)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")) == folder:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _worker_lines(log: str, most: int = 60) -> str:
    """The last lines of a service log that are not the API's access lines (the test polls the job)."""
    return "\n".join([line for line in log.splitlines() if '"GET /api/' not in line][-most:])


def _explained_while_a_job_runs(client: httpx.Client, auth: dict[str, str], done: dict[str, Any],
                                digits: Digits) -> None:
    """An explain request is answered while a second job occupies the jobs' worker: `netsynth run` serves the
    explain queue with a worker of its own. The second job is cancelled after."""
    r = client.post(f"{V1}/jobs", headers=auth, json={"dataset_id": done["dataset_id"], "budget": 300})
    assert r.status_code == 201, r.text
    busy = f"{V1}/jobs/{r.json()['id']}"
    wait_for(lambda: client.get(busy, headers=auth).json()["state"] == "running", 120, "the second job to run")
    r = client.post(f"{V1}/models/{done['model_ids'][0]}/explain", headers=auth,
                    files={"file": ("seven.png", png_bytes(digits.x_test[0]), "image/png")}, data={"method": "gradcam"})
    assert r.status_code == 202, r.text
    answered = wait_for(lambda: (a := client.get(r.json()["url"], headers=auth)).status_code == 200 and a.json(),
                        120, "the explanation")
    assert answered["state"] == "done" and answered["attribution"]["input"] == "seven.png", answered
    assert client.get(busy, headers=auth).json()["state"] == "running"  # answered while the job still runs
    assert client.post(f"{busy}/cancel", headers=auth).status_code == 200
    wait_for(lambda: client.get(busy, headers=auth).json()["state"] not in ("queued", "running"), 120,
             "the second job to stop")


def test_netsynth_run_end_to_end(tmp_path: Path, digits: Digits) -> None:
    home = tmp_path / "home"
    home.mkdir()
    service = Embedded(home, "first.log")
    try:
        service.wait_up()
        match = KEY.search(service.log())
        assert match is not None, service.log()
        auth = {"Authorization": f"Bearer {match[2]}"}
        with httpx.Client(base_url=service.url, timeout=60) as client:
            with digits.zip_path.open("rb") as f:
                r = client.post(f"{V1}/datasets", headers=auth, files={"file": ("digits.zip", f)})
            assert r.status_code == 201, r.text
            r = client.post(f"{V1}/jobs", headers=auth, json={"dataset_id": r.json()["id"], "budget": 60})
            assert r.status_code == 201, r.text
            job_url = f"{V1}/jobs/{r.json()['id']}"

            def job_events() -> list[dict[str, Any]]:
                reply = client.get(f"{job_url}/events", headers={**auth, "Accept": "application/json"})
                events: list[dict[str, Any]] = reply.json()
                return events

            try:
                job = wait_for(lambda: (j := client.get(job_url, headers=auth).json())["state"] not in
                               ("queued", "running") and j, JOB_WAIT_S, "the job")
            except AssertionError as late:  # say what the job and the service were doing
                last = [str(e)[:300] for e in job_events()[-12:]]
                raise AssertionError(f"{late}: events {last}\n{_worker_lines(service.log())}") from late
            assert job["state"] == "succeeded", (job, _worker_lines(service.log()))
            assert [e["kind"] for e in job_events()].count("candidate") >= 1
            onnx = client.get(f"{V1}/models/{job['model_ids'][0]}/download", headers=auth).content
            _explained_while_a_job_runs(client, auth, job, digits)
        session = ort.InferenceSession(onnx, providers=["CPUExecutionProvider"])
        (proba,) = session.run(["probabilities"], {"input": digits.x_test.astype(np.float32)})
        assert np.mean(np.argmax(proba, axis=1) == digits.y_test) >= 0.90
    finally:
        code = service.ctrl_c()
    assert code == 0, service.log()[-3000:]
    assert "netsynth stopped" in service.log()
    assert (home / "var" / "netsynth.db").is_file() and (home / "var" / "broker").is_dir()
    wait_for(lambda: not _processes_in(home), 30, "the API and worker processes to exit")

    again = Embedded(home, "second.log")  # a second start keeps the admin: no new key
    try:
        again.wait_up()
    finally:
        assert again.ctrl_c() == 0, again.log()[-3000:]
    assert KEY.search(again.log()) is None
    wait_for(lambda: not _processes_in(home), 30, "the processes to exit")
