"""Uploaded datasets (format detection, validation and profiling before any compute is spent, and loading),
and inputs to predict on.

Imports only the standard library, numpy and Pillow: it runs in the API process as well as in workers.
"""

from domain.ingest.dispatch import inspect_file, load_file
from domain.ingest.images import decode_image
from domain.ingest.inputs import Inputs, load_inputs
from domain.ingest.limits import Limits
from domain.ingest.results import ImageData, Inspection, TextData
from domain.ingest.text import TextEncoder

__all__ = [
    "ImageData", "Inputs", "Inspection", "Limits", "TextData", "TextEncoder", "decode_image", "inspect_file",
    "load_file", "load_inputs",
]
