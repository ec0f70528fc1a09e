"""`netsynth explain MODEL_DIR INPUTS --method METHOD --output DIR`: why a model package predicts what it does.

Writes `DIR/attributions.jsonl`, one JSON object per input in input order (`workers.attribution.Attribution`), and for
people PNG overlays (`DIR/overlay_00001.png`, ... in input order) for images, or `DIR/attributions.html` for texts.
`netsynth` (api/cli.py) hands this command over by name, so the API never imports JAX.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

USAGE_ERROR = 2
METHOD_NAMES = ("gradcam", "integrated-gradients", "smoothgrad", "occlusion")


def build_parser() -> argparse.ArgumentParser:
    """The command's arguments."""
    p = argparse.ArgumentParser(prog="netsynth explain", description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir", metavar="MODEL_DIR", type=Path,
                   help="the model package: the folder `netsynth synthesize` wrote (or its compressed/ folder), or "
                   "the API's native .zip")
    p.add_argument("inputs", metavar="INPUTS", type=Path,
                   help="what `netsynth predict` takes: a zip or folder of PNG / JPEG images or an .npz with x; a CSV "
                   "with a text column or a TSV / TXT of texts")
    p.add_argument("--method", required=True, choices=METHOD_NAMES,
                   help="gradcam (images only), integrated-gradients, smoothgrad or occlusion")
    p.add_argument("--output", required=True, type=Path, help="a new or empty folder to write into")
    p.add_argument("--batch-size", type=int, default=32, help="inputs explained at once (default: 32)")
    return p


def run(args: argparse.Namespace) -> int:
    """Explain, write the outputs; return how many inputs were explained. domain.errors on bad input."""
    from domain.errors import InvalidInput
    from domain.ingest import load_inputs
    from domain.package import image_shape, read_package, resize_policy, write_package

    if args.batch_size < 1:
        raise InvalidInput(f"the batch size must be at least 1, not {args.batch_size}")
    if args.output.exists() and (not args.output.is_dir() or any(args.output.iterdir())):
        raise InvalidInput(f"{args.output} exists and is not an empty folder")
    package = read_package(args.model_dir)
    inputs = load_inputs(args.inputs, image_shape(package.preprocessing), policy=resize_policy(package.preprocessing))
    from workers.app import use_cpu_xla_flags

    use_cpu_xla_flags()
    from workers.attribution import explain, overlay_png, package_subject, text_html

    subject = package_subject(package)
    found = explain(subject, package.classes, package.preprocessing, args.method, inputs.names,
                    images=inputs.images, texts=inputs.texts, batch_size=args.batch_size)
    files = {"attributions.jsonl": "".join(json.dumps(a.to_dict(), ensure_ascii=False) + "\n"
                                           for a in found).encode("utf-8")}
    if inputs.images is not None:
        width = max(5, len(str(len(found))))
        files.update({f"overlay_{i + 1:0{width}d}.png": overlay_png(inputs.images[i], a) for i, a in enumerate(found)})
    else:
        files["attributions.html"] = text_html(found).encode("utf-8")
    write_package(args.output, files, what="explanations")
    return len(found)


def main(argv: Sequence[str] | None = None) -> int:
    """Run `netsynth explain`; return 0, or 2 on bad input."""
    from domain.errors import StoreError

    args = build_parser().parse_args(argv)
    try:
        count = run(args)
    except StoreError as exc:
        print(f"netsynth: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    print(f"explained {count} inputs of {args.model_dir} by {args.method} into {args.output}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
