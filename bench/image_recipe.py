"""Which training recipe the image seeds ship with: each recipe trains the first image seed (the hand-written CNN)
for the same seconds on the engine's own training rows and is scored on its validation rows (never a test split).

Recipes: ``adamw`` (AdamW, peak 1e-3, weight decay 1e-4, batch 64) and ``sgd`` (Nesterov SGD, peak 0.2, weight
decay 5e-4, batch 128, 15 % warm-up: the hand-written CNN's recipe); both with label smoothing 0.1, random shifts
and — where the flip test of the search allows it (``--flip``) — flips, and a schedule planned in seconds
(``until_deadline``).

Usage: ``python bench/image_recipe.py --datasets cifar10_small,digits --seconds 150 [--data ../shared/data]
[--out bench/results/image_recipe.json]``. Run it alone on the machine: the load average is recorded.
"""

from __future__ import annotations

import argparse
import functools
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

RECIPES = {"adamw": {"optimizer": "adamw", "learning_rate": 1e-3, "weight_decay": 1e-4, "batch_size": 64},
           "sgd": {"optimizer": "sgd", "learning_rate": 0.2, "weight_decay": 5e-4, "batch_size": 128}}


def run(dataset: str, recipe: str, seconds: float, data_dir: Path, flip: bool) -> dict[str, Any]:
    """Train the hand-written CNN seed with `recipe` for `seconds` on the engine's training rows of `dataset`'s
    training part; its validation accuracy and epochs."""
    from peers import datasets

    from core.model import build
    from core.training import train
    from synthesis import space
    from synthesis.engine import space_info, split_task
    from synthesis.interface import Task

    split = datasets.load(dataset, 0, data_dir=data_dir)
    task = Task("image", split.x_train, split.y_train, len(split.classes))
    parts, _, data = split_task(task, seed=0, test_fraction=0.0)
    info = space_info(task, parts.train)
    seed = space.seeds(info)[0]
    hparams = replace(seed.hparams, **RECIPES[recipe])  # type: ignore[arg-type]
    config = replace(hparams.to_train_config(epochs=200, seed=0, time_limit_s=seconds, patience=None),
                     flip=flip, until_deadline=True)
    result = train(build(space.to_spec(seed, info)), data, config)
    return {"dataset": dataset, "recipe": recipe, "seconds": seconds, "val_accuracy": result.best_metric,
            "epochs": len(result.history), "train_rows": len(data.x_train), "val_rows": len(data.x_val)}


def main() -> None:
    """Run every (dataset, recipe) pair one after another in this process; print and write the rows."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="cifar10_small,digits")
    p.add_argument("--seconds", type=float, default=150.0)
    p.add_argument("--data", type=Path, default=HERE.parent.parent / "shared" / "data")
    p.add_argument("--out", type=Path, default=HERE / "results" / "image_recipe.json")
    import protocol

    protocol.add_busy(p)
    args = p.parse_args()
    sys.path.insert(0, str(HERE))
    from peers import datasets

    protocol.run_rows(args.out, [functools.partial(run, dataset, recipe, args.seconds, args.data,
                                                   flip=dataset in datasets.MIRRORABLE)
                                 for dataset in args.datasets.split(",") for recipe in RECIPES], args.busy)

if __name__ == "__main__":
    main()
