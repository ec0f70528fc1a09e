"""netsynth's JAX core: network spec, layers, training, compression primitives and export."""
