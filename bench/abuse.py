"""A rough tenant against a live service, and what a well-behaved user beside it sees.

On loopback, against this machine's PostgreSQL and Redis (a fresh database, a queue of its own): `uvicorn
api.app:create_app --factory --workers 2` and one Celery worker, with the product's rate limits, quotas and body
timeout. The rough user first trains a small digits model (`--job-seconds`). Then the well-behaved user reads its
own things (`GET /me`, its dataset, its job list) every `--interval` seconds, alone (the baseline) and during each
attack in turn, each `--seconds` long:

- *slow bodies*: `--connections` uploads that announce 10 MB and send one byte a second (for the body timeout and
  15 s more, at least);
- *memory bombs*: uploads at the limits: an `.npz` of a few 4096x4096x3 images, a zip whose one PNG unpacks to
  20000x20000 pixels, a PNG followed by 30 MB of junk, and a zip of 200,000 empty members, one after another;
- *key multiplication*: keys created until the cap refuses one, then every key sends `GET /me` as fast as it can;
- *unknown keys*: `--flooders` threads send `GET /me` with random keys as fast as they can;
- *explain flood*: `--flooders` threads ask for Grad-CAM explanations of the rough user's model as fast as they can;
- then the well-behaved user alone again for a minute (*after the attacks*).

Measured per phase: the well-behaved user's requests, p50 and p99 latency and errors (any status but 200, any
transport error); the rough user's statuses; the API processes' peak RSS growth. Target: 0 errors and a p99 within
2x the baseline's. Prints a table; writes `bench/results/abuse.json`.

Usage: ``python bench/abuse.py [--seconds 30] [--interval 0.25] [--connections 32] [--flooders 4] [--out FILE]``
"""

from __future__ import annotations

import argparse
import io
import secrets
import socket
import sys
import threading
import time
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import protocol  # noqa: E402
from load import RssSampler, children, fresh_service, ms, start_job, status  # noqa: E402
from PIL import Image  # noqa: E402

from infra.settings import Settings  # noqa: E402
from tests.workers.conftest import make_keys  # noqa: E402
from tests.workers.service import wait_for  # noqa: E402

V1 = "/api/v1"
SAMPLES = 8
"""Small images per class in a bomb zip: more than a class needs, so the check goes on to the bomb."""
RECOVERY_S = 60.0
"""How long the well-behaved user is measured alone after the last attack: whether the service is back to its
baseline (and the machine quiet again before the run's closing load average is read)."""
Attack = Callable[[threading.Event, Counter[str]], None]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=30.0, help="how long each phase lasts")
    p.add_argument("--interval", type=float, default=0.25, help="seconds between the well-behaved user's requests")
    p.add_argument("--connections", type=int, default=32, help="slow uploads held open at once")
    p.add_argument("--flooders", type=int, default=4, help="threads of each flood")
    p.add_argument("--job-seconds", type=int, default=40, help="the rough user's model's budget")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "abuse.json")
    protocol.add_busy(p)
    return p.parse_args(argv)


def png(side: int = 8) -> bytes:
    """A grey PNG image."""
    out = io.BytesIO()
    Image.new("L", (side, side), 128).save(out, format="PNG")
    return out.getvalue()


def well_behaved(url: str, auth: dict[str, str], dataset: str, interval: float, stop: threading.Event
                 ) -> tuple[list[float], Counter[str]]:
    """Read the user's own things every `interval` seconds until `stop`; the latencies and the errors."""
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    paths = [f"{V1}/me", f"{V1}/datasets/{dataset}", f"{V1}/jobs"]
    with httpx.Client(base_url=url, headers=auth, timeout=60) as client:
        while not stop.is_set():
            started = time.perf_counter()
            path = paths[len(latencies) % len(paths)]
            try:
                r = client.get(path)
            except httpx.HTTPError as exc:
                errors[f"{path} {type(exc).__name__}"] += 1
            else:
                latencies.append(time.perf_counter() - started)
                if r.status_code != 200:
                    errors[f"{path} {r.status_code}"] += 1
            stop.wait(max(0.0, interval - (time.perf_counter() - started)))
    return latencies, errors


def slow_bodies(url: str, auth: dict[str, str], connections: int) -> Attack:
    """Uploads that announce 10 MB and send a byte a second; each answer's status is counted."""
    host, port = url.removeprefix("http://").split(":")
    head = (f"POST {V1}/datasets HTTP/1.1\r\nHost: {host}\r\nAuthorization: {auth['Authorization']}\r\n"
            "Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 10000000\r\n\r\n--b\r\n").encode()

    def attack(stop: threading.Event, seen: Counter[str]) -> None:
        def one() -> None:
            with socket.create_connection((host, int(port)), timeout=1) as s:
                s.sendall(head)
                if stop.wait(1.0):
                    seen["open at the end"] += 1
                    return
                while not stop.is_set():
                    try:
                        s.sendall(b"x")
                        answer = s.recv(64)
                    except TimeoutError:
                        continue
                    except OSError as exc:
                        seen[type(exc).__name__] += 1
                        return
                    seen[answer.split(b" ")[1].decode() if answer.startswith(b"HTTP/") else "closed"] += 1
                    return
                seen["open at the end"] += 1
        threads = [threading.Thread(target=one) for _ in range(connections)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return attack


def bombs(folder: Path) -> list[tuple[str, Path]]:
    """Files at the limits a rough user may upload, each named by what it is."""
    made = []
    path = folder / "large.npz"
    np.savez(path, x=np.zeros((4, 4096, 4096, 3), np.uint8), y=np.array([0, 1, 0, 1]))
    made.append(("npz of 4 images of 4096x4096x3 (200 MB)", path))
    path = folder / "pixels.zip"  # enough small images per class that the check reaches the large one
    big = io.BytesIO()
    Image.new("1", (20000, 20000)).save(big, format="PNG")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for c in ("a", "b"):
            for i in range(SAMPLES):
                z.writestr(f"set/{c}/{i}.png", png())
            z.writestr(f"set/{c}/big.png", big.getvalue())
    made.append(("zip with a PNG of 20000x20000 pixels", path))
    path = folder / "junk.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for c in ("a", "b"):
            for i in range(SAMPLES):
                z.writestr(f"set/{c}/{i}.png", png())
        z.writestr("set/a/junk.png", png() + secrets.token_bytes(30 * 1024 * 1024))
    made.append(("zip with a PNG followed by 30 MB of junk", path))
    path = folder / "members.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for i in range(200_000):
            z.writestr(f"set/{'ab'[i % 2]}/{i}.png", b"")
    made.append(("zip of 200,000 empty members", path))
    return made


def memory_bombs(url: str, auth: dict[str, str], files: list[tuple[str, Path]]) -> Attack:
    """Upload each file once, one after another, while the phase lasts; each answer's status is counted by file."""
    def attack(stop: threading.Event, seen: Counter[str]) -> None:
        with httpx.Client(base_url=url, headers=auth, timeout=300) as client:
            for i, (what, path) in enumerate(files):
                if stop.is_set():
                    return
                with path.open("rb") as f:
                    r = client.post(f"{V1}/datasets", files={"file": (path.name, f)}, data={"name": f"bomb{i}"})
                seen[f"{what}: {r.status_code} {r.json().get('reason', '') if r.status_code >= 400 else ''}"] += 1
    return attack


def flood(url: str, headers: Callable[[int], dict[str, str]], send: Callable[[httpx.Client], httpx.Response],
          threads: int) -> Attack:
    """`threads` clients sending as fast as they can until the phase ends, the i-th request with `headers(i)`."""
    def attack(stop: threading.Event, seen: Counter[str]) -> None:
        def one(k: int) -> None:
            with httpx.Client(base_url=url, timeout=60) as client:
                i = k
                while not stop.is_set():
                    client.headers.update(headers(i))
                    try:
                        seen[str(send(client).status_code)] += 1
                    except httpx.HTTPError as exc:
                        seen[type(exc).__name__] += 1
                    i += threads
        workers = [threading.Thread(target=one, args=(k,)) for k in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    return attack


def many_keys(url: str, auth: dict[str, str]) -> tuple[list[dict[str, str]], Counter[str]]:
    """Keys created until the cap refuses one (at most 200 tries); the rough user's keys and the statuses."""
    keys, seen = [auth], Counter[str]()
    with httpx.Client(base_url=url, headers=auth, timeout=60) as client:
        for i in range(200):
            r = client.post(f"{V1}/me/keys", json={"name": f"k{i}"})
            seen[f"create {r.status_code}"] += 1
            if r.status_code != 201:
                break
            keys.append({"Authorization": f"Bearer {r.json()['key']}"})
    return keys, seen


def phase(name: str, url: str, auth: dict[str, str], dataset: str, args: argparse.Namespace, pids: list[int],
          attack: Attack | None, seconds: float | None = None) -> dict[str, Any]:
    """The well-behaved user's figures while `attack` runs (none: the baseline), with the attack's statuses."""
    stop, seen = threading.Event(), Counter[str]()
    rough = threading.Thread(target=attack, args=(stop, seen)) if attack else None
    rss = {p: status(p, "VmRSS") for p in pids}
    with RssSampler(pids) as sampler:
        if rough:
            rough.start()
        timer = threading.Timer(seconds or args.seconds, stop.set)
        timer.start()
        latencies, errors = well_behaved(url, auth, dataset, args.interval, stop)
        if rough:
            rough.join()
    row = {"phase": name, "requests": len(latencies), "p50_ms": ms(latencies, 0.5), "p99_ms": ms(latencies, 0.99),
           "errors": dict(errors), "rough_statuses": dict(seen),
           "api_rss_growth_mb": round(max(sampler.peak[p] - rss[p] for p in pids), 1)}
    print(row, flush=True)
    return row


def measure(url: str, api_pid: int, db_url: str, folder: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    keys = make_keys(db_url)
    good, rough = keys.alice, keys.bob
    job = start_job(url, rough, folder, args.job_seconds)
    with httpx.Client(base_url=url, headers=rough, timeout=60) as client:
        wait_for(lambda: client.get(f"{V1}/jobs/{job}").json()["state"] == "succeeded", 600, "the rough user's job")
        model = client.get(f"{V1}/jobs/{job}").json()["model_ids"][0]
    with httpx.Client(base_url=url, headers=good, timeout=60) as client, (folder / "digits.zip").open("rb") as f:
        dataset = client.post(f"{V1}/datasets", files={"file": ("digits.zip", f)}).json()["id"]
    pids = children(api_pid)
    bomb_files = bombs(folder)
    image = png()
    rows = [phase("baseline", url, good, dataset, args, pids, None),
            phase("slow bodies", url, good, dataset, args, pids, slow_bodies(url, rough, args.connections),
                  max(args.seconds, Settings().body_timeout_s + 15)),  # long enough to see the body timeout
            phase("memory bombs", url, good, dataset, args, pids, memory_bombs(url, rough, bomb_files))]
    made, created = many_keys(url, rough)
    rows.append(phase("key multiplication", url, good, dataset, args, pids,
                      flood(url, lambda i: made[i % len(made)], lambda c: c.get(f"{V1}/me"), args.flooders)))
    rows[-1]["rough_statuses"].update(created)
    rows.append(phase("unknown keys", url, good, dataset, args, pids,
                      flood(url, lambda i: {"Authorization": f"Bearer ns_{secrets.token_hex(16)}"},
                            lambda c: c.get(f"{V1}/me"), args.flooders)))
    rows.append(phase("explain flood", url, good, dataset, args, pids,
                      flood(url, lambda i: rough, lambda c: c.post(f"{V1}/models/{model}/explain", data={
                          "method": "gradcam"}, files={"file": ("x.png", image)}), args.flooders)))
    rows.append(phase("after the attacks", url, good, dataset, args, pids, None, RECOVERY_S))
    return rows


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    with fresh_service("abuse", 2, limited=True) as (url, api, db_url, folder):
        return measure(url, api.pid, db_url, folder, args)


def table(rows: list[dict[str, Any]]) -> str:
    """The printed table: each phase's figures for the well-behaved user and what the attack got."""
    base = rows[0]["p99_ms"] or 0.0
    lines = [f"{'phase':<20} {'requests':>8} {'p50 ms':>7} {'p99 ms':>7} {'x base':>6} {'errors':>6} {'RSS+ MB':>7}  "
             "rough user's statuses"]
    for r in rows:
        ratio = f"{(r['p99_ms'] or 0.0) / base:.1f}" if base else "-"
        lines.append(f"{r['phase']:<20} {r['requests']:>8} {r['p50_ms']!s:>7} {r['p99_ms']!s:>7} {ratio:>6} "
                     f"{sum(r['errors'].values()):>6} {r['api_rss_growth_mb']:>7}  {r['rough_statuses']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    record = protocol.start(args.busy)
    rows = run(args)
    print(table(rows))
    base = rows[0]["p99_ms"] or 0.0
    verdict = {r["phase"]: {"errors": sum(r["errors"].values()), "p99_within_2x": (r["p99_ms"] or 0.0) <= 2 * base}
               for r in rows[1:]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    protocol.write(args.out, {"settings": {k: str(v) for k, v in vars(args).items()}, "phases": rows,
                              "targets": {"errors": 0, "p99_vs_baseline": 2.0}, "verdict": verdict}, record)


if __name__ == "__main__":
    main()
