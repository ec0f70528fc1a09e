"""Whether a moving average of the weights (EMA) lowers the hand CNN seed's validation error: one run per set trains
the seed with its shipped recipe (Nesterov SGD, warm-up + cosine to zero, shifts, flips where the set allows) for a
fixed number of epochs on the engine's training rows, keeps averages of several horizons beside it, and scores the
last weights and each average on the validation rows (never a test split). One run gives every variant the same
trajectory, so their differences are the averages' alone.

A horizon is the share of the run's steps an average spans: decay ``1 - 1 / (share * steps)``, warmed up as
``min(decay, (1 + t) / (10 + t))``, as ``TrainConfig.ema_decay`` does.

Usage: ``python bench/weight_average.py --runs cifar10_small:25,mnist:3,digits:100 [--data ../shared/data]
[--out bench/results/weight_average.json]`` (set:epochs). Run it alone on the machine: the load average is recorded.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

HORIZONS = (0.02, 0.05, 0.1, 0.2)


def run(dataset: str, epochs: int, data_dir: Path, flip: bool) -> dict[str, Any]:
    """Train the hand-written CNN seed on `dataset`'s engine training rows for `epochs`; the validation accuracy of
    its last weights and of each horizon's average."""
    import jax
    import jax.numpy as jnp
    import optax
    from peers import datasets

    from core.data import steps_per_epoch, train_batches
    from core.evaluation import evaluate
    from core.model import build
    from core.step import init_state, make_optimizer, make_train_step
    from synthesis import space
    from synthesis.engine import space_info, split_task
    from synthesis.interface import Task

    split = datasets.load(dataset, 0, data_dir=data_dir)
    task = Task("image", split.x_train, split.y_train, len(split.classes))
    parts, _, data = split_task(task, seed=0, test_fraction=0.0)
    info = space_info(task, parts.train)
    seed = space.seeds(info)[0]
    config = replace(seed.hparams.to_train_config(epochs=epochs, seed=0, time_limit_s=None, patience=None), flip=flip)
    model = build(space.to_spec(seed, info))
    total = epochs * steps_per_epoch(len(data.x_train), config.batch_size)
    optimizer = make_optimizer(config, total)
    step = make_train_step(model, optimizer, config)
    state = init_state(model, model.init(jax.random.fold_in(jax.random.key(0), 0)), optimizer, None)
    decays = {h: 1 - 1 / (h * total) for h in HORIZONS}
    averages = {h: jax.tree.map(jnp.array, state.params) for h in HORIZONS}

    @jax.jit
    def follow(average: Any, params: Any, t: jax.Array, decay: float) -> Any:
        rate = jnp.minimum(decay, (1 + t) / (10 + t))
        return optax.incremental_update(params, average, 1 - rate)

    key, t, start = jax.random.fold_in(jax.random.key(0), 1), 0, time.perf_counter()
    for epoch in range(1, epochs + 1):
        for x, y in train_batches(data.x_train, data.y_train, config.batch_size, config.seed, epoch):
            state, _ = step(state, jnp.asarray(x), jnp.asarray(y), key)
            averages = {h: follow(a, state.params, jnp.float32(t), decays[h]) for h, a in averages.items()}
            t += 1
    seconds = time.perf_counter() - start

    def score(params: Any) -> float:
        variables = {"params": params, "batch_stats": state.batch_stats}
        return float(evaluate(model, variables, data.x_val, data.y_val)["accuracy"])

    return {"dataset": dataset, "epochs": epochs, "steps": total, "train_rows": len(data.x_train),
            "val_rows": len(data.x_val), "train_s": round(seconds, 1), "last": score(state.params),
            **{f"average_{h}": score(a) for h, a in averages.items()}}


def main() -> None:
    """Run each (set, epochs) pair one after another in this process; print and write the rows."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default="cifar10_small:25,mnist:3,digits:100")
    p.add_argument("--data", type=Path, default=HERE.parent.parent / "shared" / "data")
    p.add_argument("--out", type=Path, default=HERE / "results" / "weight_average.json")
    import protocol

    protocol.add_busy(p)
    args = p.parse_args()
    sys.path.insert(0, str(HERE))
    from peers import datasets

    runs = [(dataset, int(epochs)) for dataset, epochs in (item.split(":") for item in args.runs.split(","))]
    protocol.run_rows(args.out, [functools.partial(run, dataset, epochs, args.data, flip=dataset in datasets.MIRRORABLE)
                                 for dataset, epochs in runs], args.busy)

if __name__ == "__main__":
    main()
