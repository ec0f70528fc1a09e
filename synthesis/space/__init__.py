"""The search spaces of netsynth's architecture search, serialised to core specs.

A candidate is a JSON genome (architecture and training hyper-parameters) that :func:`to_spec` turns
into a core spec; :func:`seeds`, :func:`sample` and :func:`mutate` propose candidates, and
:func:`check` prunes those that break deployment constraints before any training.
"""

from synthesis.space.candidates import is_fitted, mutate, sample, seeds, shrink, to_spec
from synthesis.space.constraints import Constraints, check, sample_admissible
from synthesis.space.latency import LatencyModel
from synthesis.space.types import Candidate, HParams, SpaceInfo, genome_id

__all__ = ["Candidate", "Constraints", "HParams", "LatencyModel", "SpaceInfo", "check", "genome_id", "is_fitted",
           "mutate", "sample", "sample_admissible", "seeds", "shrink", "to_spec"]
