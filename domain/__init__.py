"""The product's own rules and formats, free of JAX, the database and the web framework, defined once for `api/`,
`synthesis/`, `workers/` and `store/`: the rules (`rules`: tiers, budget limits, tolerance), the dataset formats,
their validation, profile and loading, the text encoder and the image resize policy (`ingest`), the model package
(`package`, its README `package_readme`), the one ONNX runner (`onnx_run`) and the domain errors (`errors`). The
arrows: docs/architecture.md."""
