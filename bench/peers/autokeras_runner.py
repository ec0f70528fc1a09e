"""AutoKeras 3.0.0 (Keras 3, JAX backend) trained and scored under a wall-clock budget.

Runs INSIDE AutoKeras's own virtual environment (it needs its own pinned keras and jax), as a subprocess of
``bench/synthesis_quality.py``; it imports nothing of netsynth's. Create the environment with::

    python3 -m venv /tmp/ak-venv
    /tmp/ak-venv/bin/pip install autokeras==3.0.0 keras==3.12.1 six jax jaxlib pandas

Usage: ``AK_PYTHON autokeras_runner.py --data DATA.npz --budget SECONDS --seed N --out RESULT.json``, where
DATA.npz holds ``x_train, y_train, x_test, y_test`` (images uint8 [N, H, W, C], or texts as a unicode array [N]).

What it takes to run AutoKeras 3.0.0 fairly:

* a budget: AutoKeras has none, so a tuner subclass stops starting trials when the time left cannot hold a
  short trial plus the final refit, cuts a running trial at an epoch end, and cuts the refit at the deadline;
* callbacks are added inside the tuner, never passed to ``fit()`` (its refit turns them into a list of lists);
* the score comes from the final refit model (``best_model.keras``) with the refit pipeline: ``predict()``
  pairs the search checkpoint with the refit pipeline, whose text vocabulary differs;
* ``validation_split`` takes the last 20 % unshuffled: the training data is shuffled once first;
* the greedy tuner's first trial is fixed (a random draw is not covered by its seed): for images the
  ImageClassifier's first set (vanilla conv block; the search is restricted to ``ImageBlock(block_type=
  "vanilla")``, ResNet50 at ImageNet size being hopeless on a CPU), for text the TextClassifier's set with
  Adam at learning rate 1e-3 instead of 2e-5 (at 2e-5 it stays at chance).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "jax")

REFIT_GROWTH = 1.25
"""The refit trains on training + validation data: 1.25x the rows of a search trial."""

IMAGE_FIRST_TRIAL: dict[str, Any] = {
    "image_block_1/normalize": True,
    "image_block_1/augment": False,
    "image_block_1/conv_block_1/kernel_size": 3,
    "image_block_1/conv_block_1/num_blocks": 1,
    "image_block_1/conv_block_1/num_layers": 2,
    "image_block_1/conv_block_1/max_pooling": True,
    "image_block_1/conv_block_1/separable": False,
    "image_block_1/conv_block_1/dropout": 0.25,
    "image_block_1/conv_block_1/filters_0_0": 32,
    "image_block_1/conv_block_1/filters_0_1": 64,
    "classification_head_1/spatial_reduction_1/reduction_type": "flatten",
    "classification_head_1/dropout": 0.5,
    "optimizer": "adam",
    "learning_rate": 1e-3,
}
"""AutoKeras's ImageClassifier first trial (``tuners/task_specific.py``), its block type fixed to vanilla."""

TEXT_FIRST_TRIAL: dict[str, Any] = {
    "text_block_1/max_tokens": 500,
    "text_block_1/embedding_1/embedding_dim": 32,
    "text_block_1/embedding_1/dropout": 0.25,
    "text_block_1/conv_block_1/kernel_size": 3,
    "text_block_1/conv_block_1/separable": False,
    "text_block_1/conv_block_1/max_pooling": True,
    "text_block_1/conv_block_1/num_blocks": 2,
    "text_block_1/conv_block_1/num_layers": 2,
    "text_block_1/conv_block_1/filters_0_0": 32,
    "text_block_1/conv_block_1/filters_0_1": 32,
    "text_block_1/conv_block_1/dropout": 0.0,
    "text_block_1/conv_block_1/filters_1_0": 32,
    "text_block_1/conv_block_1/filters_1_1": 32,
    "text_block_1/spatial_reduction_1/reduction_type": "flatten",
    "text_block_1/dense_block_1/use_batchnorm": False,
    "text_block_1/dense_block_1/num_layers": 2,
    "text_block_1/dense_block_1/units_0": 32,
    "text_block_1/dense_block_1/dropout": 0.0,
    "text_block_1/dense_block_1/units_1": 32,
    "classification_head_1/dropout": 0,
    "optimizer": "adam",
    "learning_rate": 1e-3,
}
"""AutoKeras's TextClassifier first trial, with Adam at 1e-3 instead of AdamW at 2e-5."""


class Clock:
    """The budget: when a trial may start, when a running one must stop, when the refit must stop."""

    def __init__(self, budget_s: float) -> None:
        self.start = time.monotonic()
        self.deadline = self.start + budget_s
        self.best_loss = float("inf")
        self.best_refit_s = 0.0  # estimated refit time of the best trial so far
        self.first_epochs: list[float] = []  # each trial's first epoch (compilation included)
        self.epochs: list[float] = []  # later epochs of every trial

    def now(self) -> float:
        """Seconds on the monotonic clock."""
        return time.monotonic()

    def refit_reserve(self, trial_s: float) -> float:
        """Seconds to keep for the refit: the best trial's estimate, or this one's if it becomes the best."""
        return max(self.best_refit_s, REFIT_GROWTH * trial_s)

    def steady_epoch_s(self) -> float:
        """Seconds of a search epoch after the first (the first includes compilation)."""
        return statistics.mean(self.epochs or self.first_epochs or [0.0])

    def may_start_trial(self) -> bool:
        """Whether a short trial (a first epoch and two more) and its refit still fit before the deadline."""
        if not self.first_epochs:
            return True
        shortest = statistics.mean(self.first_epochs) + 2 * statistics.mean(self.epochs or self.first_epochs)
        return self.now() + shortest + self.refit_reserve(shortest) <= self.deadline

    def must_cut(self, trial_s: float, epoch_s: list[float]) -> bool:
        """Whether a trial that has run `trial_s` seconds, with epochs of `epoch_s`, cannot afford another epoch.

        The first epoch includes compilation, so until a second one is timed the next one is assumed free.
        """
        nxt = epoch_s[-1] if len(epoch_s) > 1 else 0.0
        return self.now() + nxt + self.refit_reserve(trial_s + nxt) > self.deadline

    def trial_done(self, epoch_s: list[float], val_losses: list[float]) -> None:
        """Record a finished trial's epoch times and validation losses."""
        if not epoch_s:
            return
        self.first_epochs.append(epoch_s[0])
        self.epochs.extend(epoch_s[1:])
        finite = [v for v in val_losses if np.isfinite(v)]
        if finite and min(finite) < self.best_loss:
            best = int(np.argmin(np.where(np.isfinite(val_losses), val_losses, np.inf)))
            steady = statistics.mean(epoch_s[1:]) if len(epoch_s) > 1 else epoch_s[0]
            self.best_loss = min(finite)
            self.best_refit_s = REFIT_GROWTH * (epoch_s[0] + best * steady)


def make_tuner(clock: Clock, first_trial: dict[str, Any]) -> Any:
    """A greedy AutoKeras tuner that keeps to `clock` and whose first trial is `first_trial`."""
    callback: Any = importlib.import_module("keras").callbacks.Callback
    trial_status: Any = importlib.import_module("keras_tuner").engine.trial.TrialStatus
    greedy_oracle: Any = importlib.import_module("autokeras.tuners.greedy").GreedyOracle
    auto_tuner: Any = importlib.import_module("autokeras.engine.tuner").AutoTuner

    class TrialWatch(callback):  # type: ignore[misc]
        """Times a trial's epochs, stops it when the budget cannot afford another, and reports it."""

        def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
            self.started = clock.now()
            self.epoch_s: list[float] = []
            self.val_losses: list[float] = []

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.epoch_start = clock.now()

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.epoch_s.append(clock.now() - self.epoch_start)
            self.val_losses.append(float((logs or {}).get("val_loss", np.inf)))
            if clock.must_cut(clock.now() - self.started, self.epoch_s):
                self.model.stop_training = True

        def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
            clock.trial_done(self.epoch_s, self.val_losses)

    class RefitCut(callback):  # type: ignore[misc]
        """Stops the final refit at the epoch end after which another epoch would pass the deadline (its first
        epoch includes compilation: the next one is estimated from the search's later epochs)."""

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.epoch_start = clock.now()

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            last = clock.now() - self.epoch_start
            nxt = REFIT_GROWTH * clock.steady_epoch_s() if epoch == 0 else last
            if clock.now() + nxt > clock.deadline:
                self.model.stop_training = True

    class BudgetOracle(greedy_oracle):  # type: ignore[misc]
        """The greedy oracle, stopping the search when the budget cannot hold another trial."""

        def populate_space(self, trial_id: str) -> dict[str, Any]:
            if not clock.may_start_trial():
                return {"status": trial_status.STOPPED, "values": None}
            result: dict[str, Any] = super().populate_space(trial_id)
            return result

    class BudgetTuner(auto_tuner):  # type: ignore[misc]
        """AutoKeras's Greedy tuner with the budget oracle and the budget callbacks."""

        def __init__(self, hypermodel: Any, objective: str = "val_loss", max_trials: int = 100,
                     seed: int | None = None, hyperparameters: Any = None, tune_new_entries: bool = True,
                     allow_new_entries: bool = True, **kwargs: Any) -> None:
            oracle = BudgetOracle(objective=objective, max_trials=max_trials, initial_hps=[first_trial],
                                  seed=seed, hyperparameters=hyperparameters, tune_new_entries=tune_new_entries,
                                  allow_new_entries=allow_new_entries)
            super().__init__(oracle=oracle, hypermodel=hypermodel, **kwargs)

        def _build_and_fit_model(self, trial: Any, *args: Any, **kwargs: Any) -> Any:
            kwargs["callbacks"] = [*kwargs.get("callbacks", []), TrialWatch()]
            return super()._build_and_fit_model(trial, *args, **kwargs)

        def final_fit(self, **kwargs: Any) -> Any:
            kwargs["callbacks"] = [RefitCut()]
            return super().final_fit(**kwargs)

    return BudgetTuner


def run(data: dict[str, np.ndarray], budget_s: float, seed: int, workdir: Path) -> dict[str, Any]:
    """Search and refit within `budget_s` seconds, then score the refit model on the test set."""
    ak = importlib.import_module("autokeras")
    keras = importlib.import_module("keras")
    text = data["x_train"].dtype.kind == "U"
    np.random.seed(seed)
    keras.utils.set_random_seed(seed)
    order = np.random.default_rng(seed).permutation(len(data["y_train"]))  # validation_split takes the tail
    x_train, y_train = data["x_train"][order], data["y_train"][order]
    clock = Clock(budget_s)
    inputs = ak.TextInput() if text else ak.ImageInput()
    block = ak.TextBlock() if text else ak.ImageBlock(block_type="vanilla")
    outputs = ak.ClassificationHead()(block(inputs))
    tuner = make_tuner(clock, TEXT_FIRST_TRIAL if text else IMAGE_FIRST_TRIAL)
    # keras-tuner takes seed 0 for "no seed": offset it
    model = ak.AutoModel(inputs=inputs, outputs=outputs, tuner=tuner, max_trials=100, overwrite=True,
                         directory=str(workdir), project_name="ak", seed=seed + 1)
    model.fit(x_train, y_train, validation_split=0.2, verbose=2)
    wall_s = clock.now() - clock.start
    best = keras.models.load_model(model.tuner.best_model_path, custom_objects=ak.CUSTOM_OBJECTS)
    pipeline = model.tuner.get_best_pipeline()
    x_test = pipeline.transform_x(model._adapt(data["x_test"], model.inputs))
    predicted = np.asarray(pipeline.postprocess(best.predict(x_test, verbose=0))).reshape(-1)
    truth = data["y_test"].reshape(-1)
    numeric = predicted.dtype.kind in "biuf"  # binary heads decode to floats 0.0 / 1.0, others to the labels
    errors = int(np.sum(predicted.astype(float) != truth) if numeric else np.sum(predicted != truth.astype(str)))
    trials = [{"id": t.trial_id, "status": str(t.status), "val_loss": t.score, "best_epoch": t.best_step,
               "hps": t.hyperparameters.values}
              for t in model.tuner.oracle.trials.values()]
    return {"test_error": errors / len(truth), "params": int(best.count_params()), "wall_s": wall_s,
            "trials": trials, "versions": {"autokeras": ak.__version__, "keras": keras.__version__,
                                           "backend": keras.backend.backend()}}


def main() -> None:
    """Read the data, run, write the result JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--budget", type=float, required=True, help="seconds for search and refit")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    with np.load(args.data) as npz:
        data = {k: npz[k] for k in ("x_train", "y_train", "x_test", "y_test")}
    with tempfile.TemporaryDirectory(prefix="ak-") as tmp:
        result = run(data, args.budget, args.seed, Path(tmp))
    args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
