"""The linear text floor: fitted by logistic regression, the core network that computes it, its place in a search."""

from __future__ import annotations

import re
import time
from dataclasses import replace

import jax
import numpy as np
import pytest

from core.data import Dataset
from core.evaluation import predict_proba
from core.model import build
from core.onnx_export import to_onnx_bytes
from domain.onnx_run import OnnxClassifier
from synthesis import linear, select
from synthesis.budget import Budget
from synthesis.engine import synthesize
from synthesis.interface import Options, Task
from synthesis.space import Candidate, SpaceInfo, seeds, to_spec
from synthesis.space.text import LINEAR
from tests.synthesis.conftest import LATENCY
from tests.synthesis.events import Events

LENGTH, BAG, VOCAB, WORDS = 8, 12, 200, 60


def bag_task(n: int = 360, classes: int = 3, seed: int = 0, noise: int = 6, blocks: int = 2) -> Task:
    """Token rows as the text encoder makes them: `LENGTH` word ids, then `BAG` sorted distinct bag ids in
    [1, VOCAB); each row's bag holds one of five features of its class (ids 1 + 10 c ...: the word block, which
    ends at WORDS when there are two blocks) among `noise` random ones (ids 40 ... VOCAB - 1)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = np.zeros((n, LENGTH + BAG), np.int32)
    x[:, :LENGTH] = rng.integers(2, 50, (n, LENGTH))
    for i in range(n):
        features = {int(f) for f in rng.integers(40, VOCAB, noise)} | {1 + 10 * int(y[i]) + int(rng.integers(0, 5))}
        bag = sorted(features)[:BAG]
        x[i, LENGTH:LENGTH + len(bag)] = bag
    return Task("text", x, y, classes, vocab_size=64, bag_start=LENGTH, bag_vocab=VOCAB,
                bag_words=WORDS if blocks == 2 else 0)


def info_of(task: Task) -> SpaceInfo:
    return SpaceInfo("text", (int(task.x.shape[1]),), task.num_classes, vocab_size=task.vocab_size,
                     bag_start=task.bag_start, bag_vocab=task.bag_vocab, bag_words=task.bag_words)


def halves(task: Task) -> Dataset:
    cut = len(task.y) * 3 // 4
    return Dataset(task.x[:cut], task.y[:cut], task.x[cut:], task.y[cut:])


def fit(task: Task, deadline: float | None = None) -> linear.LinearFit:
    data = halves(task)
    return linear.fit(data.x_train, data.y_train, task.num_classes, bag(task), 0, deadline)


def bag(task: Task) -> linear.Bag:
    return linear.Bag(task.bag_start, task.bag_vocab, task.bag_words)


def floor_candidate(task: Task) -> Candidate:
    return next(c for c in seeds(info_of(task)) if c.origin == "seed:linear")


@pytest.mark.parametrize(("classes", "blocks"), [(2, 2), (3, 2), (3, 1)])
def test_the_floor_network_computes_the_fitted_model_in_jax_and_onnx(classes: int, blocks: int) -> None:
    task = bag_task(classes=classes, blocks=blocks)
    floor = fit(task)
    data = halves(task)
    spec = to_spec(floor_candidate(task), info_of(task))
    expected = np.exp(floor.log_proba(data.x_val))
    assert len([n for n in spec.nodes if n.op == "embedding_bag"]) == blocks
    np.testing.assert_allclose(predict_proba(build(spec), floor.variables(), data.x_val), expected, atol=1e-5)
    onnx = OnnxClassifier(to_onnx_bytes(spec, floor.variables()))
    np.testing.assert_allclose(onnx.predict_proba(data.x_val), expected, atol=1e-5)
    assert np.mean(expected.argmax(axis=1) == data.y_val) > 0.9  # the class features are found among the noise


def test_a_binary_floor_splits_its_one_decision_function_between_the_classes() -> None:
    floor = fit(bag_task(classes=2))
    np.testing.assert_allclose(floor.coef[0], -floor.coef[1])
    np.testing.assert_allclose(floor.intercept[0], -floor.intercept[1])


def test_the_form_and_c_of_the_best_out_of_fold_score_are_kept() -> None:
    floor = fit(bag_task(classes=2, noise=10))
    assert list(floor.tried) == [f"{form} C={c:g}" for c in linear.C_GRID for form in linear.FORMS] + [linear.BLEND]
    best = select.rank(list(floor.tried), lambda k: floor.tried[k], len(floor.held_out))[0]
    assert best == floor.key
    assert len({round(loss, 6) for _, loss in floor.tried.values()}) > 1  # C matters: the choice is real


def test_a_multi_class_floor_tries_logistic_regression_on_tf_idf_only() -> None:
    floor = fit(bag_task(classes=3))
    assert {k.split(" ")[0] for k in floor.tried} == {"tfidf"} and floor.form == "tfidf"


def test_a_deadline_that_has_passed_stops_the_path_after_one_c() -> None:
    floor = fit(bag_task(classes=2), deadline=time.monotonic() - 1)
    assert list(floor.tried) == [f"{form} C={linear.C_GRID[0]:g}" for form in linear.FORMS] + [linear.BLEND]
    assert {part.c for part in floor.parts} == {linear.C_GRID[0]}


def test_held_out_log_probabilities_come_from_models_that_did_not_see_the_row() -> None:
    """Labels at random and one feature unique to each row: fitted on all rows the floor memorises them, but each
    row's held-out figure comes from a fold that never saw its feature, so it is at chance."""
    rng = np.random.default_rng(3)
    n = 300
    y = rng.integers(0, 2, n)
    x = np.zeros((n, 2), np.int32)
    x[:, 1] = np.arange(n) + 1  # the bag: one id per row
    floor = linear.fit(x, y, 2, linear.Bag(1, n + 1), 0)
    memorised = np.mean(floor.log_proba(x).argmax(axis=1) == y)
    held_out = np.mean(floor.held_out.argmax(axis=1) == y)
    assert floor.held_out.shape == (n, 2)
    assert memorised > 0.95 and held_out < 0.65


def test_the_nb_ratio_is_positive_for_features_of_class_one_and_the_network_computes_the_nb_form() -> None:
    task = bag_task(classes=2)
    data = halves(task)
    ratio = linear.nb_ratio(data.x_train, data.y_train, bag(task))
    assert ratio[1 + 10 * 1] > 0 > ratio[1 + 10 * 0]  # the class features (ids 1 + 10 c) lean to their class
    nb = linear.refit_as(bag(task), (linear.Part("nb", 1.0),), data.x_train, data.y_train, 2)
    spec = to_spec(floor_candidate(task), info_of(task))
    np.testing.assert_allclose(predict_proba(build(spec), nb.variables(), data.x_val),
                               np.exp(nb.log_proba(data.x_val)), atol=1e-5)


@pytest.mark.parametrize("share", [0.3, 0.8])
def test_a_blend_of_the_two_forms_is_one_linear_model_the_network_computes(share: float) -> None:
    """The blend's logits are the share-weighted logits of the two forms fitted alone, in numpy, JAX and ONNX."""
    task = bag_task(classes=2)
    data = halves(task)
    parts = (linear.Part("tfidf", 0.3, share), linear.Part("nb", 3.0, round(1 - share, 1)))
    blend = linear.refit_as(bag(task), parts, data.x_train, data.y_train, 2)
    alone = [linear.refit_as(bag(task), (replace(p, share=1.0),), data.x_train, data.y_train, 2) for p in parts]
    logits = sum(p.share * a.log_proba(data.x_val) for p, a in zip(parts, alone, strict=True))
    expected = np.exp(logits - np.logaddexp.reduce(logits, axis=1, keepdims=True))
    np.testing.assert_allclose(np.exp(blend.log_proba(data.x_val)), expected, atol=1e-6)
    spec = to_spec(floor_candidate(task), info_of(task))
    np.testing.assert_allclose(predict_proba(build(spec), blend.variables(), data.x_val), expected, atol=1e-5)
    onnx = OnnxClassifier(to_onnx_bytes(spec, blend.variables()))
    np.testing.assert_allclose(onnx.predict_proba(data.x_val), expected, atol=1e-5)
    assert blend.form == linear.BLEND and blend.description == f"{share:g} tfidf C=0.3 + {1 - share:.1g} nb C=3"


def test_the_blend_is_scored_with_shares_chosen_on_the_other_folds() -> None:
    """Form `a` is right on the first half of the rows and `b` on the second: each half is scored with the share
    its other half prefers, so the blend is wrong everywhere, as a share chosen without those rows would be."""
    y = np.tile([0, 1], 10)
    right, wrong = np.log([[0.9, 0.1], [0.1, 0.9]]), np.log([[0.1, 0.9], [0.9, 0.1]])
    a = np.concatenate([right[y[:10]], wrong[y[10:]]])
    b = np.concatenate([wrong[y[:10]], right[y[10:]]])
    halves_ = [(np.arange(10, 20), np.arange(10)), (np.arange(10), np.arange(10, 20))]
    logits = linear.blend_out_of_fold(a, b, y, halves_)
    assert linear.share_of(a[:10], b[:10], y[:10]) == max(linear.SHARES)
    np.testing.assert_allclose(logits[:10], min(linear.SHARES) * a[:10] + max(linear.SHARES) * b[:10])
    assert np.all(logits.argmax(axis=1) != y)


def test_the_blend_is_chosen_when_it_scores_best_and_refitted_with_its_parts() -> None:
    """A quarter of the labels flipped (seed 1, 400 rows): neither form alone is as good out of fold as their
    blend, which ships as its two parts with their Cs and shares."""
    task = bag_task(n=400, classes=2, noise=10, seed=1)
    y = task.y.copy()
    flip = np.random.default_rng(1).random(len(y)) < 0.25
    y[flip] = 1 - y[flip]
    floor = linear.fit(task.x, y, 2, bag(task), 0)
    assert floor.key == linear.BLEND and [p.form for p in floor.parts] == list(linear.FORMS)
    assert sum(p.share for p in floor.parts) == pytest.approx(1.0)
    assert select.rank(list(floor.tried), lambda k: floor.tried[k], len(y))[0] == linear.BLEND
    np.testing.assert_allclose(floor.held_out, floor.held_out - np.logaddexp.reduce(floor.held_out, axis=1,
                                                                                     keepdims=True), atol=1e-9)
    refitted = linear.refit(floor, task.x, y, 2)
    assert refitted.parts == floor.parts
    np.testing.assert_allclose(refitted.coef, floor.coef)


def test_padding_and_ids_outside_the_bag_vocabulary_carry_no_weight() -> None:
    x = np.asarray([[0, 0, 3, 5, 0], [0, 0, 7, 250, 0]], np.int32)  # a 2-id word part, then the bag
    features = linear.features(x, linear.Bag(2, 10)).toarray()
    np.testing.assert_allclose(features[0, [3, 5]], [2 ** -0.5] * 2)
    np.testing.assert_allclose(features[1, 7], 1.0)  # 250 is outside [0, 10): not counted in the norm either
    assert features[:, 0].sum() == 0 and np.count_nonzero(features) == 3


def test_each_block_of_the_bag_is_normalised_on_its_own() -> None:
    """Two word features and four character features: each block has the norm of one, as a union of two TF-IDF
    vectorisers has, so the few word features weigh as much as the many character features."""
    x = np.asarray([[0, 2, 3, 6, 7, 8, 9]], np.int32)
    features = linear.features(x, linear.Bag(1, 10, words=5)).toarray()[0]
    np.testing.assert_allclose(features[[2, 3]], [2 ** -0.5] * 2)
    np.testing.assert_allclose(features[[6, 7, 8, 9]], [0.5] * 4)


def test_the_refit_learns_from_the_validation_rows_too() -> None:
    task = bag_task(classes=2)
    data = halves(task)
    x_val = data.x_val.copy()
    x_val[:, -1] = np.where(data.y_val == 1, 35, 0)  # a feature seen only in validation rows, all of class 1
    floor = linear.fit(data.x_train, data.y_train, 2, bag(task))
    assert floor.coef[1, 35] == 0.0
    refitted = linear.refit(floor, np.concatenate([data.x_train, x_val]), np.concatenate([data.y_train, data.y_val]),
                            2)
    assert refitted.parts == floor.parts and refitted.coef[1, 35] > 0.0


def test_text_seeds_start_with_the_floor_only_where_the_input_has_an_n_gram_bag() -> None:
    task = bag_task()
    first = seeds(info_of(task))[0]
    assert first.arch == LINEAR and first.origin == "seed:linear" and first.hparams.label_smoothing == 0.0
    no_bag = SpaceInfo("text", (LENGTH,), 3, vocab_size=64)
    assert all(c.arch.get("encoder") != "linear" for c in seeds(no_bag))


def test_the_search_fits_the_floor_first_and_the_delivered_model_is_chosen_on_validation() -> None:
    task = bag_task(n=600, noise=8)
    events = Events()
    result = synthesize(task, Budget(epochs=12), Options(seed=0, latency=LATENCY, compress=False), events)
    first = result.log[0]
    assert first["origin"] == "seed:linear" and first["status"] == "completed"
    assert re.fullmatch(r"(0\.\d )?(tfidf|nb) C=[\d.]+( \+ 0\.\d nb C=[\d.]+)?", first["reason"].split(" (")[0])
    assert all(not e["origin"].startswith("mutation:" + first["id"]) for e in result.log)  # the floor is not mutated
    choice = events.of("ensemble")
    delivered = result.model.metrics["candidate"]
    if choice:  # the floor did not win outright: network, floor and their average were compared
        chosen = choice[0]["chosen"]
        expected = {"network": choice[0]["network"], "floor": first["id"]}.get(chosen, result.log[-1]["id"])
        assert delivered == expected
        if chosen == "ensemble":
            assert result.log[-1]["origin"] == f"ensemble:{first['id']}+{choice[0]['network']}"
    with_floor = delivered == first["id"] or result.log[-1]["origin"].startswith("ensemble:")
    floor_refits = [e for e in events.of("refit") if e["model"] == "linear floor"]
    assert with_floor == bool(floor_refits)  # the floor ships refitted on all rows
    assert result.model.metrics["test_accuracy"] >= 0.9


def test_an_unpredictive_network_never_ships_over_the_floor() -> None:
    """A network at chance beside a floor that has learned: what ships is the floor or an average leaning on it."""
    from synthesis.ensemble import finish
    from synthesis.floor import fit_trial
    from synthesis.trial import Trial

    task = bag_task(n=600)
    info, data = info_of(task), halves(task)
    floor_trial = Trial(0, floor_candidate(task))
    floor_trial.result, fitted = fit_trial(info, data, 0.0, None)
    assert fitted is not None
    network = next(c for c in seeds(info) if c.origin == "seed:hashed-ngrams")
    weights = build(to_spec(network, info)).init(jax.random.key(0))  # untrained: about chance
    net_trial = Trial(1, network)
    events = Events()
    trials = [floor_trial, net_trial]
    shipped, _, delivered = finish(trials, (floor_trial, fitted), net_trial, weights, info, data, events)
    (choice,) = events.of("ensemble")
    assert choice["chosen"] in ("floor", "ensemble") and shipped is not net_trial
    assert choice["network_val"]["accuracy"] < 0.6 < choice["floor_val"]["accuracy"]
    if choice["chosen"] == "floor":  # it ships calibrated: its logits divided by the temperature fitted out of fold
        logits = fitted.log_proba(data.x_val) / choice["temperature"]
        expected = np.exp(logits - np.logaddexp.reduce(logits, axis=1, keepdims=True))
        spec = to_spec(floor_candidate(task), info)
        np.testing.assert_allclose(predict_proba(build(spec), delivered, data.x_val), expected, atol=1e-3)
        assert choice["temperature"] != 1.0


def test_an_ensemble_network_sums_its_members_logits_scaled_by_their_weights_in_jax_and_onnx() -> None:
    from synthesis.ensemble import combined
    from synthesis.space.text import ensemble

    task = bag_task()
    info, data = info_of(task), halves(task)
    floor = floor_candidate(task)
    network = next(c for c in seeds(info) if c.origin == "seed:wide-text-cnn")
    parts = [fit(task).variables(), build(to_spec(network, info)).init(jax.random.key(1))]
    members = [build(to_spec(floor, info)), build(to_spec(network, info))]
    logits = [np.asarray(m.apply(v, data.x_val)[0]) for m, v in zip(members, parts, strict=True)]
    both = Candidate(ensemble([floor.arch, network.arch], [0.3, 0.7]), network.hparams, "ensemble:test")
    spec = to_spec(both, info)
    variables = combined(parts, [0.3, 0.7], ["logits", "logits"])
    assert {"m0_bag0", "m0_bag1", "m0_logits", "m1_embed", "m1_logits"} <= set(variables["params"])
    out = np.asarray(build(spec).apply(variables, data.x_val)[0])
    np.testing.assert_allclose(out, 0.3 * logits[0] + 0.7 * logits[1], rtol=1e-4, atol=1e-4)
    expected = np.asarray(jax.nn.softmax(out, axis=-1))
    np.testing.assert_allclose(OnnxClassifier(to_onnx_bytes(spec, variables)).predict_proba(data.x_val), expected,
                               atol=1e-4)


def test_models_are_compared_at_their_own_best_temperature() -> None:
    """A network made less sure of itself (as label smoothing makes it) keeps its accuracy and, once calibrated,
    its log-loss: the comparison with the unsmoothed floor is not decided by how sure each was trained to be."""
    from synthesis.calibrate import TEMPERATURES, calibrated
    from synthesis.linear import scores

    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 500)
    logits = rng.normal(size=(500, 3)) + 2.0 * np.eye(3)[y]
    sure, unsure = calibrated(logits * 2.0, y), calibrated(logits, y)
    assert sure[0] == unsure[0] and sure[1] == pytest.approx(unsure[1], rel=1e-9)
    assert sure[2] == pytest.approx(2.0 * unsure[2])  # the surer logits are softened twice as much
    assert scores(logits, y)[1] > unsure[1] + 0.01  # uncalibrated, the softer network looked worse
    assert sure[1] == pytest.approx(min(scores(logits / t, y)[1] for t in TEMPERATURES), rel=1e-9)


def test_final_training_goes_to_the_best_network_even_when_the_floor_ranks_first() -> None:
    """On rows a linear model separates perfectly the floor ranks first; the final share still trains a network
    (the floor is fitted, not trained), and the floor, the network or their average ships by validation."""
    task = bag_task(n=400, noise=2)
    events = Events()
    result = synthesize(task, Budget(epochs=8), Options(seed=1, latency=LATENCY, compress=False), events)
    floor_id = result.log[0]["id"]
    assert result.log[0]["accuracy"] == max(e["accuracy"] for e in result.log[:-1])  # the floor is (one of) the best
    finals = events.of("final")
    assert finals and all(p["candidate"] != floor_id for p in finals)
    kinds = {kind for kind, _ in events.log}
    assert "ensemble" in kinds or "final_fallback" in kinds  # compared with the floor either way


def test_each_option_is_scored_on_validation_folds_that_did_not_fit_its_weight_and_temperature() -> None:
    """On noise, the weight and temperature fitted on all rows flatter the ensemble; scored out of fold, the same
    option loses what the fit had learned from the rows it is scored on."""
    from synthesis.calibrate import calibrated
    from synthesis.ensemble import WEIGHTS, fit_weight, out_of_fold

    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 120)
    net, lin = rng.normal(size=(120, 2)), rng.normal(size=(120, 2))
    weight, temperature = fit_weight(net, lin, y, WEIGHTS)
    in_sample = calibrated(weight * lin + (1 - weight) * net, y)
    assert in_sample[2] == temperature
    assert out_of_fold(net, lin, y, WEIGHTS, 0)[1] > in_sample[1] + 0.005
