"""Property tests: random graphs either validate, build and run, or raise a documented SpecError."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from core.errors import (
    CycleError,
    DanglingInputError,
    HyperParameterError,
    SchemaError,
    ShapeError,
    SpecError,
    UnknownOpError,
)
from core.graph import validate
from core.model import build
from core.spec import Spec

IMAGE_OPS = ["conv2d", "depthwise_conv2d", "separable_conv2d", "max_pool2d", "avg_pool2d", "batch_norm",
             "layer_norm", "activation", "dropout", "add", "concat"]
SEQ_OPS = ["conv1d", "max_pool1d", "avg_pool1d", "self_attention", "position_embedding", "layer_norm",
           "batch_norm", "activation", "dense", "add", "concat", "dropout"]


@st.composite
def hyper_params(draw: st.DrawFn, op: str) -> dict[str, Any]:
    """Plausible hyper-parameters, sometimes out of range."""
    small = st.integers(min_value=0, max_value=4)
    if op in {"conv2d", "separable_conv2d", "conv1d"}:
        return {"filters": draw(st.integers(1, 6)), "kernel_size": draw(st.integers(1, 3)),
                "strides": draw(st.integers(1, 2)), "padding": draw(st.sampled_from(["same", "valid"]))}
    if op == "depthwise_conv2d":
        return {"depth_multiplier": draw(st.integers(1, 2)), "kernel_size": draw(small)}
    if op in {"max_pool2d", "avg_pool2d", "max_pool1d", "avg_pool1d"}:
        return {"pool_size": draw(st.integers(1, 3))}
    if op == "activation":
        return {"fn": draw(st.sampled_from(["relu", "gelu", "swish", "tanh", "softplus"]))}
    if op == "dropout":
        return {"rate": draw(st.sampled_from([0.0, 0.3, 1.0]))}
    if op == "self_attention":
        return {"num_heads": draw(st.integers(1, 3))}
    if op == "dense":
        return {"units": draw(st.integers(1, 8))}
    return {}


@st.composite
def random_doc(draw: st.DrawFn) -> dict[str, Any]:
    """A random DAG over image or text input, ending in a classifier head."""
    text = draw(st.booleans())
    classes = draw(st.integers(2, 4))
    nodes: list[dict[str, Any]] = []
    if text:
        inp: dict[str, Any] = {"shape": [draw(st.integers(2, 6))], "dtype": "int32", "modality": "text"}
        nodes.append({"id": "emb", "op": "embedding", "inputs": ["input"],
                      "params": {"vocab_size": 11, "dim": draw(st.sampled_from([4, 6]))}})
        menu = SEQ_OPS
    else:
        side = draw(st.integers(3, 7))
        inp = {"shape": [side, side, draw(st.integers(1, 3))], "dtype": "float32", "modality": "image"}
        menu = IMAGE_OPS
    available = ["input"] if not text else ["emb"]
    for i in range(draw(st.integers(0, 5))):
        op = draw(st.sampled_from(menu))
        arity = 2 if op in {"add", "concat"} else 1
        srcs = [draw(st.sampled_from(available)) for _ in range(arity)]
        nodes.append({"id": f"n{i}", "op": op, "inputs": srcs, "params": draw(hyper_params(op))})
        available.append(f"n{i}")
    last = available[-1]
    nodes.append({"id": "pool", "op": draw(st.sampled_from(["global_avg_pool", "global_max_pool", "flatten"])),
                  "inputs": [last]})
    nodes.append({"id": "head", "op": "dense", "inputs": ["pool"], "params": {"units": classes}})
    return {"input": inp, "nodes": nodes, "output": {"node": "head", "num_classes": classes}}


DOCUMENTED = (SchemaError, UnknownOpError, HyperParameterError, ShapeError, CycleError, DanglingInputError)


@settings(max_examples=int(os.environ.get("NETSYNTH_PROPERTY_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(random_doc(), st.integers(0, 2**31 - 1))
def test_random_graphs_build_and_run_or_raise_documented_errors(doc: dict[str, Any], seed: int) -> None:
    try:
        graph = validate(Spec.from_dict(doc))
    except SpecError as exc:
        assert type(exc) in DOCUMENTED
        assert exc.node is None or exc.node in {n["id"] for n in doc["nodes"]}
        return
    model = build(graph)
    variables = model.init(jax.random.key(seed % 1000))
    shape = (2, *graph.spec.input.shape)
    if graph.spec.input.dtype == "int32":
        x = jax.random.randint(jax.random.key(seed), shape, 0, 11)
    else:
        x = jax.random.normal(jax.random.key(seed), shape)
    logits, _ = model.apply(variables, x)
    assert logits.shape == (2, graph.spec.num_classes)
    assert bool(jnp.all(jnp.isfinite(logits)))


def _mutate(doc: dict[str, Any], draw: st.DrawFn) -> tuple[dict[str, Any], set[type[SpecError]]]:
    """Break ``doc`` in one way; return it with the error classes that may report the fault.

    Nodes are checked in document order (op, hyper-parameters, arity, inputs), then cycles, use and
    shapes, so a random hyper-parameter fault elsewhere in the graph may be reported first.
    """
    kind = draw(st.sampled_from(["unknown_op", "bad_param", "dangling", "cycle", "unused"]))
    nodes = doc["nodes"]
    victim = nodes[draw(st.integers(0, len(nodes) - 1))]
    if kind == "unknown_op":
        victim["op"] = draw(st.sampled_from(["conv3d", "Conv2D", "lstm", ""]))
        return doc, {UnknownOpError, HyperParameterError}
    if kind == "bad_param":
        victim["params"] = {**victim.get("params", {}), "not_a_param": 1}
        return doc, {HyperParameterError}
    if kind == "dangling":
        victim["inputs"] = [*victim["inputs"][:-1], "ghost"]
        return doc, {DanglingInputError, HyperParameterError}
    if kind == "cycle":
        nodes[0]["inputs"] = [nodes[-1]["id"]] * len(nodes[0]["inputs"])
        # When nodes[0] was not an ancestor of the head there is no cycle, but it is now unused.
        return doc, {CycleError, DanglingInputError, HyperParameterError}
    nodes.insert(0, {"id": "spare", "op": "flatten", "inputs": ["input"]})
    return doc, {DanglingInputError, HyperParameterError}


@st.composite
def broken_doc(draw: st.DrawFn) -> tuple[dict[str, Any], set[type[SpecError]]]:
    """A random graph with one deliberate fault, and the error classes allowed to report it."""
    return _mutate(draw(random_doc()), draw)


@settings(max_examples=150, deadline=None)
@given(broken_doc())
def test_broken_graphs_raise_the_documented_error(case: tuple[dict[str, Any], set[type[SpecError]]]) -> None:
    doc, allowed = case
    with pytest.raises(SpecError) as info:
        validate(Spec.from_dict(doc))
    assert type(info.value) in allowed
    assert info.value.node is None or info.value.node in {"spare", *(n["id"] for n in doc["nodes"])}


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                    max_leaves=12))
def test_arbitrary_json_never_raises_anything_but_spec_error(doc: Any) -> None:
    with contextlib.suppress(SpecError):
        validate(Spec.from_dict(doc))


def _is_valid(doc: dict[str, Any]) -> bool:
    try:
        validate(Spec.from_dict(doc))
    except SpecError:
        return False
    return True


@pytest.mark.parametrize("needed", ["self_attention", "separable_conv2d", "add", "concat", "conv1d"])
def test_generator_reaches_valid_graphs_with(needed: str) -> None:
    """Guard the property test: it must exercise the build-and-run path for rich graphs too."""
    found = find(random_doc(), lambda d: _is_valid(d) and any(n["op"] == needed for n in d["nodes"]),
                 settings=settings(max_examples=2000, database=None))
    assert _is_valid(found)
