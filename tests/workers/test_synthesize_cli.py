"""`netsynth synthesize`: the package it writes, clear errors, and the same result as a worker for one seed."""

from __future__ import annotations

import csv
import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pytest

from domain.onnx_run import OnnxClassifier
from infra.settings import Settings
from tests.datasets import digits_arrays, write_image_zip, write_text_csv
from tests.workers.conftest import make_keys
from tests.workers.service import ROOT, ApiServer, WorkerProcess, wait_for
from workers import synthesize_cli as cli

V1 = "/api/v1"
EPOCHS, SEED = 8, 2


def _small_digits(folder: Path) -> Path:
    x, y = digits_arrays()
    keep = np.arange(len(y)) % 3 == 0
    return write_image_zip(folder / "digits.zip", x[keep], y[keep])


def _cli(*args: str | Path | int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NETSYNTH_", "XLA_"))}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "api.cli", "synthesize", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)


def _explain(package: Path, inputs: Path, method: str, output: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "api.cli", "explain", package, inputs, "--method", method,
                           "--output", output], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_cli_writes_the_package_and_matches_a_worker(tmp_path: Path, pg_redis_settings: Settings,
                                                     worker_factory: list[WorkerProcess]) -> None:
    data, out = _small_digits(tmp_path), tmp_path / "out"
    done = _cli(data, "--epochs", EPOCHS, "--seed", SEED, "--out", out)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "test accuracy" in done.stdout
    names = {p.name for p in out.iterdir()}
    assert {"model.onnx", "spec.json", "weights.safetensors", "preprocessing.json", "labels.json", "metrics.json",
            "search_log.jsonl", "pareto.json", "README.md"} <= names
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["seed"] == SEED and metrics["test_accuracy"] > 0.5
    cli_log = [json.loads(line) for line in (out / "search_log.jsonl").read_text().splitlines()]
    assert cli_log and all({"curve", "predicted", "accuracy", "status", "seconds"} <= e.keys() for e in cli_log)
    assert any(p["delivered"] for p in json.loads((out / "pareto.json").read_text()))
    x, _ = digits_arrays()
    assert OnnxClassifier(out / "model.onnx").predict_proba(x[:4]).shape == (4, 10)
    # the compressed variant: its own package (the artifact as weights) with the before / after figures
    small = out / "compressed"
    assert {"model.nsz", "model.onnx", "spec.json", "preprocessing.json", "labels.json", "metrics.json",
            "README.md"} <= {p.name for p in small.iterdir()}
    figures = json.loads((small / "metrics.json").read_text())
    assert figures["model_bytes"] == (small / "model.nsz").stat().st_size == figures["after"]["compressed_bytes"]
    assert figures["val_accuracy_after"] >= figures["val_accuracy_before"] - figures["tolerance"] - 1e-9
    assert metrics["compressed"]["model_bytes"] == figures["model_bytes"]
    predicted = subprocess.run([sys.executable, "-m", "api.cli", "predict", small, data, "--output",
                                tmp_path / "preds.csv"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert predicted.returncode == 0 and "accuracy" in predicted.stdout, predicted.stderr[-3000:]
    # both packages carry their explainability report, and `netsynth explain` explains with either
    for package in (out, small):
        content = json.loads((package / "report" / "report.json").read_text())
        assert content["omitted"] == [] and content["variant"] == ("dense" if package == out else "compressed")
        assert all((package / "report" / name).is_file() for name in content["images"])
        assert "data:image/png;base64," in (package / "report" / "report.html").read_text()
    few = write_image_zip(tmp_path / "few.zip", x[:3], np.array([0, 1, 2]))
    for package, method in ((out, "gradcam"), (small, "integrated-gradients")):
        explained = _explain(package, few, method, tmp_path / f"explained-{method}")
        assert explained.returncode == 0, explained.stderr[-3000:]
        lines = [json.loads(line) for line in (tmp_path / f"explained-{method}" / "attributions.jsonl").open()]
        assert [a["input"] for a in lines] == sorted(a["input"] for a in lines) and len(lines) == 3
        assert {a["method"] for a in lines} == {method} and all(np.shape(a["map"]) == (8, 8) for a in lines)
        assert len(list((tmp_path / f"explained-{method}").glob("overlay_*.png"))) == 3

    # the same data, epochs and seed through the API and a Celery worker: the same search, the same model
    settings = pg_redis_settings
    keys = make_keys(settings.database_url)
    worker_factory.append(WorkerProcess(settings, tmp_path / "worker.log").wait_ready())
    with ApiServer(settings) as api, httpx.Client(base_url=api.url, timeout=60) as client:
        with data.open("rb") as f:
            dataset = client.post(f"{V1}/datasets", headers=keys.alice, files={"file": ("digits.zip", f)}).json()
        r = client.post(f"{V1}/jobs", headers=keys.alice,
                        json={"dataset_id": dataset["id"], "epochs": EPOCHS, "seed": SEED})
        assert r.status_code == 201, r.text
        job_url = f"{V1}/jobs/{r.json()['id']}"
        job = wait_for(lambda: (j := client.get(job_url, headers=keys.alice).json())["state"] not in
                       ("queued", "running") and j, 600, "the job")
        assert job["state"] == "succeeded", job
        rows = client.get(f"{job_url}/candidates", headers=keys.alice).json()
        worker_log = [(c["genome"]["id"], c["metrics"]["curve"]) for c in rows]
        model, small_model = (client.get(f"{V1}/models/{i}", headers=keys.alice).json() for i in job["model_ids"])
        pareto = client.get(f"{job_url}/pareto", headers=keys.alice).json()
        assert client.get(f"{job_url}/candidates", headers=keys.bob).status_code == 404
    assert worker_log == [(e["id"], e["curve"]) for e in cli_log]
    assert model["metrics"]["candidate"] == metrics["candidate"]
    assert model["metrics"]["test_accuracy"] == metrics["test_accuracy"]
    assert small_model["variant"] == "compressed"  # the same seed and epochs compress the same way
    assert small_model["metrics"]["model_bytes"] == figures["model_bytes"]
    assert small_model["metrics"]["test_accuracy"] == figures["test_accuracy"]
    assert any(p["delivered"] for p in pareto)


def test_bad_data_is_a_clear_error_and_writes_nothing(tmp_path: Path) -> None:
    x, _ = digits_arrays()
    one_class = write_image_zip(tmp_path / "one.zip", x[:20], np.zeros(20, np.int64))
    done = _cli(one_class, "--budget", "30", "--out", tmp_path / "out")
    assert done.returncode == 2
    assert "too-few-classes" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
    done = _cli(one_class, "--budget", "soon", "--out", tmp_path / "out")
    assert done.returncode == 2 and "not 'soon'" in done.stderr
    done = _cli(tmp_path / "missing.zip", "--out", tmp_path / "out")
    assert done.returncode == 2 and "does not exist" in done.stderr


@pytest.mark.parametrize("refused", ["model", "compressed"])
def test_a_full_disk_is_a_one_line_error_and_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], refused: str
) -> None:
    """The disk fills up while the package (or, after it, the compressed one) is written: exit 2, one line that
    names the folder and why, and nothing of either package is left."""
    data, out = _small_digits(tmp_path), tmp_path / "out"
    write_bytes = Path.write_bytes

    def full(path: Path, content: Any) -> int:
        if refused == "model" or "compressed" in path.parent.name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return write_bytes(path, content)

    def synthesize(*_args: object) -> SimpleNamespace:  # the engine's result, without training
        monkeypatch.setattr(Path, "write_bytes", full)
        metrics = {"test_accuracy": 0.9, "nonzero_params": 10, "model_bytes": 40, "ratio": 2.0}
        model = SimpleNamespace(spec={"layers": []}, weights=b"w", onnx=b"onnx", metrics=metrics, param_count=20,
                                report=None)
        return SimpleNamespace(model=model, log=[], pareto=[], seconds=1.0, split={}, stop_reason="budget",
                               compressed=SimpleNamespace(model=model, artifact=b"nsz"))

    monkeypatch.setattr("synthesis.engine.synthesize", synthesize)
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))  # the command adds its flags: undone after
    assert cli.main([str(data), "--epochs", "1", "--out", str(out)]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    target = out if refused == "model" else out / "compressed"
    assert errors == [f"netsynth: error: cannot write the model package to {target}: No space left on device"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digits.zip"]


def _spam_texts(rows: int, seed: int) -> tuple[list[str], list[str]]:
    """Short messages: 'spam' offers prizes to call a number, 'ham' is chat (random words of each kind)."""
    rng = np.random.default_rng(seed)
    spam = ["win", "prize", "claim", "free", "urgent", "cash", "txt", "award"]
    ham = ["see", "you", "later", "home", "dinner", "ok", "love", "tomorrow"]
    texts, labels = [], []
    for i in range(rows):
        words = rng.choice(spam if i % 2 else ham, size=int(rng.integers(3, 9)))
        number = f" call 0{rng.integers(8_000_000_000, 9_000_000_000)}" if i % 2 else ""
        texts.append(" ".join(words) + number)
        labels.append("spam" if i % 2 else "ham")
    return texts, labels


def test_cli_synthesizes_texts_with_the_ngram_bag_and_predicts_raw_texts(tmp_path: Path) -> None:
    """A CSV of texts: the package's encoder appends the n-gram bag, the search tries the n-gram encoder, and
    `predict` turns raw texts into the same inputs the model was trained on."""
    texts, labels = _spam_texts(240, 0)
    data, out = write_text_csv(tmp_path / "texts.csv", texts, labels), tmp_path / "out"
    done = _cli(data, "--epochs", 6, "--seed", SEED, "--out", out)
    assert done.returncode == 0, done.stderr[-3000:]
    encoder = json.loads((out / "preprocessing.json").read_text())["encoder"]
    assert encoder["version"] == 5 and encoder["ngram_buckets"] == len(encoder["features"]) > 0
    assert 0 < encoder["word_buckets"] < encoder["ngram_buckets"] and encoder["bag_length"] >= 8
    spec = json.loads((out / "spec.json").read_text())
    assert spec["input"]["shape"] == [encoder["max_length"] + encoder["bag_length"]]
    log = [json.loads(line) for line in (out / "search_log.jsonl").read_text().splitlines()]
    assert "ngrams" in {e["arch"]["encoder"] for e in log}
    assert log[0]["arch"]["encoder"] == "linear" and log[0]["status"] == "completed"  # the floor comes first
    unseen, truth = _spam_texts(40, 1)
    held_out = write_text_csv(tmp_path / "unseen.csv", unseen, truth)
    predicted = subprocess.run([sys.executable, "-m", "api.cli", "predict", out, held_out, "--output",
                                tmp_path / "preds.csv"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    with (tmp_path / "preds.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 40 and np.mean([r["predicted"] == t for r, t in zip(rows, truth, strict=True)]) >= 0.9
    # explanations are per whitespace word, in input order; Grad-CAM refuses a text model in words
    explained = _explain(out, held_out, "occlusion", tmp_path / "why")
    assert explained.returncode == 0, explained.stderr[-3000:]
    lines = [json.loads(line) for line in (tmp_path / "why" / "attributions.jsonl").open()]
    assert [a["tokens"] for a in lines] == [t.split() for t in unseen]
    assert all(len(a["scores"]) == len(a["tokens"]) and a["label"] in {"ham", "spam"} for a in lines)
    assert (tmp_path / "why" / "attributions.html").is_file()
    refused = _explain(out, held_out, "gradcam", tmp_path / "no")
    assert refused.returncode == 2 and "does not explain text models" in refused.stderr
    assert not (tmp_path / "no").exists()


def test_progress_bar_shows_stage_best_accuracy_and_trials() -> None:
    from rich.console import Console

    console = Console(record=True, force_terminal=True, width=120)
    with cli.ProgressBar("60 s", console=console) as bar:
        bar.stage("search")
        bar.progress(0.5, {"val_accuracy": 0.8})
        bar.event("candidate", {"accuracy": 0.9123})
        bar.event("candidate", {"accuracy": 0.5})
        bar.progress(0.25, {})  # the bar never goes back
    assert bar.fraction == 0.5 and bar.trials == 2 and bar.best == 0.9123
    shown = console.export_text()
    assert "search" in shown and "of 60 s" in shown and "best 0.9123  trials 2" in shown
