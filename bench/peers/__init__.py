"""The alternatives netsynth is measured against in ``bench/synthesis_quality.py``, one module per peer.

``autokeras_runner`` runs inside AutoKeras's own virtual environment and is never imported by netsynth's code.
"""
