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
from synthesis.explain import METHODS, Subject, checks, integrated, smoothgrad, suspects
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
def test_pixels_in_attribution_order_lower_the_probability_faster_than_at_random_and_restore_it_faster(
        objects: dict[str, Any], name: str) -> None:
    subject, x, y = objects["subject"], objects["x"][:24], objects["y"][:24]
    maps = METHODS[name].images(subject, x, y)
    verdict = checks.faithfulness(lambda mode, order: checks.image_curve(subject, x, y, maps, mode, order))
    assert verdict["deletion_auc"] < verdict["random_deletion_auc"]
    assert verdict["insertion_auc"] > verdict["random_insertion_auc"]
    assert verdict["better_than_random"]


def test_a_map_that_points_away_from_the_evidence_fails_its_check(objects: dict[str, Any]) -> None:
    """The negated integrated-gradients map ranks the deciding pixels last: both curves lose to random order."""
    subject, x, y = objects["subject"], objects["x"][:24], objects["y"][:24]
    maps = -METHODS["integrated-gradients"].images(subject, x, y)
    verdict = checks.faithfulness(lambda mode, order: checks.image_curve(subject, x, y, maps, mode, order))
    assert verdict["deletion_auc"] > verdict["random_deletion_auc"]
    assert not verdict["better_than_random"]



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


def test_the_rows_whose_label_was_flipped_are_the_suspects_and_clean_labels_are_not() -> None:
    """With 5 % of the digits' labels flipped, their neighbours in the features of a network early in its training
    list at least 80 % of the flipped rows at a precision of at least 0.5, each suggesting another label than the
    given one; with the true labels, at most 1 % of the rows are listed."""
    digits = load_digits()
    x, y = (digits.images[..., None] * 16).astype(np.float32), digits.target.astype(np.int64)
    rng = np.random.default_rng(0)
    k = round(0.05 * len(y))
    flipped = rng.choice(len(y), k, replace=False)
    noisy = y.copy()
    noisy[flipped] = (y[flipped] + rng.integers(1, 10, k)) % 10
    spec = object_cnn(classes=10, size=8)
    rows = np.arange(len(y))[::-1].copy()  # uploaded positions differ from the array's
    for labels, expect_flips in ((noisy, True), (y, False)):
        early = Subject.of(spec, trained(spec, x, labels, epochs=10))
        shares = suspects.neighbour_shares(suspects.features(early, x), labels, 10)
        found = suspects.suspect_labels(shares, labels, rows)
        assert all(s.suggested != s.given == labels[len(y) - 1 - s.row] for s in found)
        if expect_flips:
            hits = len({len(y) - 1 - s.row for s in found} & set(flipped.tolist()))
            assert hits >= 0.8 * k and hits >= 0.5 * len(found)
        else:
            assert len(found) <= 0.01 * len(y)


def test_a_rows_own_label_never_votes_for_it() -> None:
    """Two identical rows with different labels each see only the other (and the rest): each is contradicted."""
    feats = np.array([[1.0, 0.0]] * 6 + [[0.0, 1.0]] * 6, np.float32)
    y = np.array([0] * 6 + [1] * 5 + [0])
    shares = suspects.neighbour_shares(feats, y, 2)
    assert shares[-1, 0] == 0.0 and shares[-1, 1] == 1.0  # its five neighbours of class 1, never itself
    found = suspects.suspect_labels(shares, y, np.arange(12))
    assert [(s.row, s.given, s.suggested) for s in found] == [(11, 0, 1)]


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


def test_grad_cams_layer_has_at_least_four_by_four_cells_where_the_network_has_such_a_map() -> None:
    """On 8x8 digits a three-stage network's last map is 2x2, too coarse to point at a stroke: Grad-CAM takes the
    last 4x4 map instead (on 4x4 inputs, the first stage's map)."""
    info = SpaceInfo("image", (8, 8, 1), 10, scale=1 / 16, offset=0.0)
    three = image.to_spec(image.arch([image.stage("plain", 1, 8), image.stage("plain", 1, 16),
                                      image.stage("plain", 1, 24)]), info, "three")
    graph = Subject.of(three, {"params": {}}).graph
    (layer,) = spatial_layers(graph)
    shape = graph.types[layer].shape
    assert shape[0] * shape[1] == 16
    later = [n.id for n in graph.order][[n.id for n in graph.order].index(layer) + 1:]
    assert all(len(graph.types[n].shape) != 3 or graph.types[n].shape[0] * graph.types[n].shape[1] < 16
               for n in later)
    tiny = image.to_spec(image.arch([image.stage("plain", 1, 8), image.stage("plain", 1, 16)]),
                         SpaceInfo("image", (4, 4, 1), 10, scale=1 / 16, offset=0.0), "tiny")
    tiny_graph = Subject.of(tiny, {"params": {}}).graph
    assert [tiny_graph.types[v].shape[:2] for v in spatial_layers(tiny_graph)] == [(4, 4)]


def test_neighbours_of_a_large_set_come_from_a_sample_of_it_and_never_include_the_row(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(suspects, "REFERENCE_ROWS", 40)
    rng = np.random.default_rng(0)
    y = np.arange(300) % 3
    feats = np.eye(3)[y] + rng.normal(0, 0.05, (300, 3))
    shares = suspects.neighbour_shares(feats, y, 3)
    np.testing.assert_allclose(shares.sum(axis=1), 1.0)
    assert (shares[np.arange(300), y] == 1.0).all()  # the classes are apart: every neighbour agrees
    y[5] = (y[5] + 1) % 3
    assert suspects.neighbour_shares(feats, y, 3)[5, y[5]] == 0.0  # its own label is not among its neighbours'


def test_the_suspects_feature_pass_stops_at_its_time_past_the_reference_rows(objects: dict[str, Any],
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Once its time is up, the pass judges no more rows than the reference (rounded up to a chunk); with time, or
    before the reference rows are done, every row. The rows are judged in a seeded random order (a uniform sample)."""
    monkeypatch.setattr(suspects, "REFERENCE_ROWS", 8)
    monkeypatch.setattr(suspects, "CHUNK", 4)
    subject, x = objects["subject"], np.repeat(objects["x"][:1], 20, axis=0)
    assert len(suspects.features(subject, x)) == 20
    assert len(suspects.features(subject, x, until=0.0)) == 8
    order = suspects.checking_order(20)
    assert sorted(order.tolist()) == list(range(20)) and order.tolist() != list(range(20))
    assert order.tolist() == suspects.checking_order(20).tolist()
