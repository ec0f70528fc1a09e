"""Graph validation and shape inference for a spec, with errors that name the node at fault."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.errors import (
    CycleError,
    DanglingInputError,
    SchemaError,
    ShapeError,
    UnknownOpError,
)
from core.op_params import normalise
from core.ops import OPS, TensorType
from core.spec import INPUT, Node, Spec


@dataclass(frozen=True)
class Graph:
    """A validated spec: nodes in topological order, with defaults filled in and output types."""

    spec: Spec
    order: tuple[Node, ...]
    types: dict[str, TensorType]

    def input_types(self, node: Node) -> list[TensorType]:
        """Return the types of the tensors ``node`` reads."""
        return [self.types[i] for i in node.inputs]

    @property
    def output_type(self) -> TensorType:
        """Return the type of the network's output (``[num_classes]``)."""
        return self.types[self.spec.output]


def validate(spec: Spec) -> Graph:
    """Check ``spec`` fully and infer every node's output type.

    Raises a :class:`~core.errors.SpecError` subclass naming the node: ``UnknownOpError``,
    ``HyperParameterError``, ``DanglingInputError`` (reads a missing node, or is never used),
    ``CycleError``, ``ShapeError``; ``SchemaError`` for duplicate ids or a missing output node.
    """
    by_id: dict[str, Node] = {}
    for node in spec.nodes:
        if node.id in by_id:
            raise SchemaError("duplicate node id", node.id)
        by_id[node.id] = node
    normalised: dict[str, Node] = {}
    for node in spec.nodes:
        op = OPS.get(node.op)
        if op is None:
            raise UnknownOpError(f"unknown op '{node.op}'; known ops: {sorted(OPS)}", node.id)
        params = normalise(node.id, op.hparams, node.params)
        n_in = len(node.inputs)
        if not op.min_inputs <= n_in <= op.max_inputs:
            want = op.min_inputs if op.min_inputs == op.max_inputs else f"at least {op.min_inputs}"
            raise DanglingInputError(f"op '{node.op}' takes {want} input(s), got {n_in}", node.id)
        for src in node.inputs:
            if src != INPUT and src not in by_id:
                raise DanglingInputError(f"reads '{src}', which is not a node of the spec", node.id)
        normalised[node.id] = Node(node.id, node.op, node.inputs, params)
    if spec.output not in by_id:
        raise SchemaError(f"output node '{spec.output}' is not a node of the spec")
    order = _topological(normalised)
    _check_all_used(spec, order)
    types: dict[str, TensorType] = {INPUT: TensorType(spec.input.shape, spec.input.dtype)}
    for node in order:
        types[node.id] = _infer(node, [types[i] for i in node.inputs])
    out = types[spec.output]
    if out.shape != (spec.num_classes,):
        raise ShapeError(f"the output node must yield [{spec.num_classes}] logits, got {list(out.shape)}",
                         spec.output)
    return Graph(Spec(spec.input, tuple(normalised[n.id] for n in spec.nodes), spec.output,
                      spec.num_classes, spec.name), tuple(order), types)


def _infer(node: Node, inputs: list[TensorType]) -> TensorType:
    op = OPS[node.op]
    for t in inputs:
        if t.dtype != op.input_dtype:
            raise ShapeError(f"op '{node.op}' needs {op.input_dtype} input, got {t.dtype}", node.id)
    try:
        return op.infer(node.params, inputs)
    except ShapeError as exc:
        raise ShapeError(exc.detail, node.id) from None


def _topological(nodes: dict[str, Node]) -> list[Node]:
    """Kahn's algorithm; keeps the spec's order among ready nodes so that output is stable."""
    pending = {nid: {i for i in n.inputs if i != INPUT} for nid, n in nodes.items()}
    order: list[Node] = []
    ready = [nid for nid, deps in pending.items() if not deps]
    while ready:
        nid = ready.pop(0)
        order.append(nodes[nid])
        del pending[nid]
        for other, deps in pending.items():
            if nid in deps:
                deps.discard(nid)
                if not deps and other not in ready:
                    ready.append(other)
    if pending:
        on_cycle = _find_cycle(nodes, set(pending))
        raise CycleError(f"the graph has a cycle: {' -> '.join(on_cycle)}", on_cycle[0])
    return order


def _find_cycle(nodes: dict[str, Node], left: set[str]) -> list[str]:
    start = sorted(left)[0]
    path: list[str] = [start]
    seen = {start}
    while True:
        nxt = next(i for i in nodes[path[-1]].inputs if i in left)
        if nxt in seen:
            return [*path[path.index(nxt):], nxt]
        path.append(nxt)
        seen.add(nxt)


def _check_all_used(spec: Spec, order: list[Node]) -> None:
    used = {spec.output}
    for node in reversed(order):
        if node.id in used:
            used.update(node.inputs)
    for node in order:
        if node.id not in used:
            raise DanglingInputError("its output is never used on the way to the output node", node.id)
    if INPUT not in used:
        raise DanglingInputError("the network never reads its input", spec.output)


def load(doc: Any) -> Graph:
    """Parse and validate a spec given as JSON text, bytes or a parsed dictionary."""
    spec = Spec.from_dict(doc) if isinstance(doc, dict) else Spec.from_json(doc)
    return validate(spec)
