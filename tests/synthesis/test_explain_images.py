"""Attribution checks that can fail, on images whose answer is known (issue 26): localisation, sanity under
weight randomisation, completeness of integrated gradients, deletion faithfulness; and the mislabel check."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.datasets import load_digits

from core.model import build
from synthesis.explain import METHODS, Subject, checks, integrated, smoothgrad, tracin
from synthesis.explain.subject import output_layers, spatial_layers
from synthesis.space import image
from synthesis.space.types import SpaceInfo
from tests.synthesis.explain_sets import object_cnn, object_images, on_object, trained

TEST = 120


@pytest.fixture(scope="module")
def objects() -> dict[str, Any]:
    """A CNN trained on the object set, and its correctly classified held-out images with their boxes."""
    x, y, boxes = object_images(3000 + TEST, seed=0)
    spec = object_cnn()
    subject = Subject.of(spec, trained(spec, x[:3000], y[:3000], epochs=8))
    xt, yt, bt = x[3000:], y[3000:], boxes[3000:]
    right = subject.probabilities(xt).argmax(axis=1) == yt
    assert right.mean() > 0.9  # the set is learnable: the checks below are about the maps, not the model
    return {"subject": subject, "x": xt[right], "y": yt[right], "boxes": bt[right]}


@pytest.mark.parametrize("name", ["gradcam", "integrated-gradients"])
def test_the_map_peaks_on_the_object_that_decides_the_class(objects: dict[str, Any], name: str) -> None:
    """The argmax of the map falls on the object for at least 85 % of correctly classified test images (by chance:
    the object's area fraction, 25 / 1024)."""
    maps = METHODS[name].images(objects["subject"], objects["x"], objects["y"])
    assert maps.shape == objects["x"].shape[:3]
    assert on_object(maps, objects["boxes"]) >= 0.85


@pytest.mark.parametrize("name", ["gradcam", "integrated-gradients"])
def test_randomising_the_output_layer_changes_the_map(objects: dict[str, Any], name: str) -> None:
    """Adebayo et al.'s cascade, first step: with the top layer re-initialised, the maps' rank correlation with the
    trained model's falls below 0.5."""
    subject, x, y = objects["subject"], objects["x"][:24], objects["y"][:24]
    original = METHODS[name].images(subject, x, y)
    randomised = METHODS[name].images(checks.top_block_randomised(subject, seed=1), x, y)
    rho = np.median([checks.rank_correlation(a, b) for a, b in zip(original, randomised, strict=True)])
    assert rho < 0.5
    assert np.median([checks.rank_correlation(a, a) for a in original]) > 0.99  # the measure itself can see equality


def test_integrated_gradients_are_complete(objects: dict[str, Any]) -> None:
    """The attributions sum to the target logit's difference from the black image, within 5 % of it."""
    maps, error, steps = integrated.image_attributions(objects["subject"], objects["x"][:16], objects["y"][:16])
    assert error.max() < integrated.COMPLETENESS and steps <= integrated.MAX_STEPS
    assert np.abs(maps).sum() > 0


@pytest.mark.parametrize("name", ["gradcam", "integrated-gradients", "smoothgrad", "occlusion"])
def test_deleting_pixels_in_attribution_order_lowers_the_probability_faster_than_at_random(
        objects: dict[str, Any], name: str) -> None:
    subject, x, y = objects["subject"], objects["x"][:24], objects["y"][:24]
    maps = METHODS[name].images(subject, x, y)
    ordered = checks.image_deletion(subject, x, y, maps).mean()
    random = checks.image_deletion(subject, x, y, maps, "random").mean()
    assert ordered < random


@pytest.mark.parametrize("top", [1.0, 255.0])
def test_smoothgrads_noise_is_a_share_of_each_images_own_range(monkeypatch: pytest.MonkeyPatch, top: float) -> None:
    """Images of floats in [0, 1] and of bytes get noise of the same share of their range: an image spanning
    [0, top] gets noise of standard deviation NOISE * top, one spanning a tenth of it a tenth of that."""
    seen: list[np.ndarray] = []

    def gradients(model: Any, variables: Any, noisy: Any, targets: Any) -> tuple[Any, None]:
        seen.append(np.asarray(noisy))
        return jnp.zeros_like(noisy), None

    monkeypatch.setattr(smoothgrad, "input_gradients", gradients)
    x = np.random.default_rng(0).uniform(0, 1, (2, 32, 32, 3)).astype(np.float32)
    x[0] = (x[0] - x[0].min()) / (x[0].max() - x[0].min()) * top
    x[1] = (x[1] - x[1].min()) / (x[1].max() - x[1].min()) * top / 10
    smoothgrad.image_scores(cast(Subject, SimpleNamespace(model=None, variables=None)), x, np.zeros(2, np.int32))
    noise = np.stack(seen) - x
    assert len(seen) == smoothgrad.SAMPLES
    np.testing.assert_allclose(noise[:, 0].std(), smoothgrad.NOISE * top, rtol=0.02)
    np.testing.assert_allclose(noise[:, 1].std(), smoothgrad.NOISE * top / 10, rtol=0.02)


def test_grad_cams_layer_is_found_from_the_spec(objects: dict[str, Any]) -> None:
    """The last spatial map before global pooling, and the logits layer as TracIn's output layer."""
    graph = objects["subject"].graph
    assert spatial_layers(graph) == ["c3_relu"]
    assert output_layers(graph) == ["logits"]


def test_the_rows_whose_label_was_flipped_are_the_suspects() -> None:
    """With 3 % of the digits' labels flipped, at least 60 % of the flipped rows are among the 2k rows of highest
    self-influence (k flipped)."""
    digits = load_digits()
    x, y = (digits.images[..., None] * 16).astype(np.float32), digits.target.astype(np.int32)
    rng = np.random.default_rng(0)
    k = round(0.03 * len(y))
    flipped = rng.choice(len(y), k, replace=False)
    noisy = y.copy()
    noisy[flipped] = (y[flipped] + rng.integers(1, 10, k)) % 10
    spec = object_cnn(classes=10, size=8)
    subject = Subject.of(spec, trained(spec, x, noisy, epochs=20))
    scores = tracin.self_influence([subject], x, noisy)
    suspects = tracin.suspect_labels(scores, noisy, subject.probabilities(x).argmax(axis=1), np.arange(len(y)), 2 * k)
    found = {s.row for s in suspects} & set(flipped.tolist())
    assert len(found) >= 0.6 * k
    assert all(s.given == noisy[s.row] for s in suspects)


@pytest.mark.parametrize("block", ["plain", "residual", "inverted", "dense"])
@pytest.mark.parametrize("downsample", ["max_pool", "conv"])
def test_every_block_family_the_search_can_pick_has_a_grad_cam_layer(block: str, downsample: str) -> None:
    """Grad-CAM's layer is found from the spec of every image family (two stages, either downsampling), and every
    gradient method gives one finite map per image at the input's size."""
    info = SpaceInfo("image", (16, 16, 3), 3, scale=1 / 64, offset=-1.0)
    genome = image.arch([image.stage(block, 2, 16), image.stage(block, 1, 24)], downsample=downsample)
    spec = image.to_spec(genome, info, "family")
    graph_layers = spatial_layers(Subject.of(spec, {"params": {}}).graph)
    assert len(graph_layers) == 1
    subject = Subject.of(spec, build(spec).init(jax.random.key(0)))
    x = np.random.default_rng(0).uniform(0, 255, (2, 16, 16, 3)).astype(np.float32)
    for name in ("gradcam", "integrated-gradients", "smoothgrad"):
        maps = METHODS[name].images(subject, x, np.array([0, 2]))
        assert maps.shape == (2, 16, 16) and np.isfinite(maps).all()
