"""The Celery worker processes the `netsynth` command starts (`netsynth worker`, `netsynth run`): the workers' code is
loaded by name in them, never imported here."""

from __future__ import annotations

import signal
import subprocess
import sys

from infra.settings import Settings


def worker_command(queues: str, concurrency: int) -> list[str]:
    """The command that starts a Celery worker process serving `queues` with one pool process per device."""
    return [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "--queues", queues,
            "--concurrency", str(concurrency), "--pool", "prefork", "--loglevel", "INFO",
            "--hostname", f"netsynth-{queues.replace(',', '-')}@%h"]


def embedded_workers(settings: Settings, queues: str) -> list[list[str]]:
    """`netsynth run`'s workers: one for the jobs of `queues` (one pool process per device), and one pool process of
    its own for the explain queue, so that an explanation never waits for a job to end (unless `queues` names the
    explain queue: then that one worker serves both)."""
    commands = [worker_command(queues, settings.worker_devices)]
    if settings.explain_queue not in queues.split(","):
        commands.append(worker_command(settings.explain_queue, 1))
    return commands


def start(commands: list[list[str]]) -> list[subprocess.Popen[bytes]]:
    """Start each command in a session of its own."""
    return [subprocess.Popen(command, start_new_session=True) for command in commands]


def stop(processes: list[subprocess.Popen[bytes]], wait_s: float = 30) -> None:
    """Warm shutdown of every worker at once (SIGTERM: a running job's lease lapses and it is requeued, a running
    explanation's heartbeat stops and the reaper sends it again), then SIGKILL whatever has not exited in `wait_s`."""
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
