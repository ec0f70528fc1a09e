"""The hand-designed small CNN in PyTorch (CPU build): what a good engineer writes for small images.

conv3x3-BN-ReLU 32, 32, max-pool, 64, 64, max-pool, 128, global average pooling, dropout 0.2, linear;
SGD with Nesterov momentum 0.9, peak learning rate 0.2, weight decay 5e-4, label smoothing 0.1, 15 % linear
warm-up then cosine decay driven by elapsed time over the budget (so training ends at the budget with the
learning rate at zero); random shifts of up to 2 pixels, and left-right flips where the caller says the labels
allow them (photos, not digits); batch 128; pixels standardised by the training set's
mean and standard deviation; channels-last; 2 threads.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch
from torch import nn

PEAK_LR, MOMENTUM, WEIGHT_DECAY, LABEL_SMOOTHING = 0.2, 0.9, 5e-4, 0.1
WARMUP, BATCH, MAX_SHIFT, DROPOUT = 0.15, 128, 2, 0.2


def network(channels: int, classes: int) -> nn.Sequential:
    """The CNN for images of `channels` channels and `classes` classes."""

    def block(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

    return nn.Sequential(*block(channels, 32), *block(32, 32), nn.MaxPool2d(2),
                         *block(32, 64), *block(64, 64), nn.MaxPool2d(2),
                         *block(64, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(DROPOUT),
                         nn.Linear(128, classes))


def learning_rate(fraction: float) -> float:
    """The learning rate after `fraction` of the budget: linear warm-up, then cosine decay to zero."""
    if fraction < WARMUP:
        return PEAK_LR * fraction / WARMUP
    return PEAK_LR * 0.5 * (1 + math.cos(math.pi * min((fraction - WARMUP) / (1 - WARMUP), 1.0)))


def shifted(padded: torch.Tensor, size: tuple[int, int], gen: torch.Generator) -> torch.Tensor:
    """Each image of a batch padded by MAX_SHIFT, cropped back to `size` at a random offset."""
    h, w = size
    offsets = torch.randint(0, 2 * MAX_SHIFT + 1, (padded.shape[0], 2), generator=gen)
    out = torch.empty((padded.shape[0], padded.shape[1], h, w), dtype=padded.dtype)
    keys = offsets[:, 0] * (2 * MAX_SHIFT + 1) + offsets[:, 1]
    for key in torch.unique(keys).tolist():
        rows = torch.nonzero(keys == key).flatten()
        dy, dx = divmod(int(key), 2 * MAX_SHIFT + 1)
        out[rows] = padded[rows, :, dy:dy + h, dx:dx + w]
    return out


def mirrored(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Each image of a batch [N, C, H, W] mirrored left-right with probability 1/2."""
    rows = torch.rand(x.shape[0], generator=gen) < 0.5
    out = x.clone()
    out[rows] = x[rows].flip(3)
    return out


def train_and_score(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
                    budget_s: float, seed: int, threads: int = 2, flip: bool = False) -> dict[str, Any]:
    """Train on images uint8 [N, H, W, C] for `budget_s` seconds (mirrored at random when `flip`), then return
    the test error and figures."""
    start = time.monotonic()
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    gen = torch.Generator().manual_seed(seed)
    mean, std = float(x_train.mean()), float(x_train.std()) or 1.0

    def tensor(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy((x.astype(np.float32) - mean) / std).permute(0, 3, 1, 2).contiguous()

    train_x, labels = tensor(x_train), torch.from_numpy(y_train.astype(np.int64))
    size = (int(train_x.shape[2]), int(train_x.shape[3]))
    padded = nn.functional.pad(train_x, (MAX_SHIFT,) * 4, value=-mean / std)  # pad with black pixels
    classes = int(max(y_train.max(), y_test.max())) + 1
    model = network(int(train_x.shape[1]), classes).to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0, momentum=MOMENTUM, nesterov=True,
                                weight_decay=WEIGHT_DECAY)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=LABEL_SMOOTHING)
    batch = min(BATCH, len(labels))
    train_start, steps, done = time.monotonic(), 0, False
    model.train()
    while not done:
        order = torch.randperm(len(labels), generator=gen)
        for first in range(0, len(labels) - batch + 1, batch):
            fraction = (time.monotonic() - train_start) / budget_s
            if fraction >= 1:
                done = True
                break
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(fraction)
            rows = order[first:first + batch]
            x = shifted(padded[rows], size, gen)
            x = (mirrored(x, gen) if flip else x).contiguous(memory_format=torch.channels_last)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), labels[rows])
            loss.backward()
            optimizer.step()
            steps += 1
    train_s = time.monotonic() - train_start
    model.eval()
    with torch.inference_mode():
        test_x = tensor(x_test).contiguous(memory_format=torch.channels_last)
        predicted = torch.cat([model(test_x[i:i + 1000]).argmax(1) for i in range(0, len(test_x), 1000)])
    errors = int((predicted.numpy() != y_test).sum())
    return {"test_error": errors / len(y_test), "params": sum(p.numel() for p in model.parameters()),
            "wall_s": time.monotonic() - start,
            "details": {"epochs": round(steps * batch / len(labels), 2), "steps": steps,
                        "train_s": round(train_s, 1), "flip": flip, "threads": torch.get_num_threads(),
                        "torch": torch.__version__, "final_loss": float(loss.detach()) if steps else None}}
