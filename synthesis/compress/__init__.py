"""Fine-grained synthesis: filter selection, connection pruning and weight bucketing of a trained network,
retrained within an accuracy tolerance and packed into the compressed artifact (:mod:`core.artifact`).

Entry point: :func:`compress` returning a :class:`Compressed`.
"""

from synthesis.compress.context import Options, grant
from synthesis.compress.pipeline import Compressed, compress
from synthesis.compress.reinit import ReinitError

__all__ = ["Compressed", "Options", "ReinitError", "compress", "grant"]
