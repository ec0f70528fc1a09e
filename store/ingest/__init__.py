"""Uploaded datasets (format detection, validation and profiling before any compute is spent, and loading),
and inputs to predict on.

Imports only the standard library, numpy and Pillow: it runs in the API process as well as in workers.
"""

from store.ingest.dispatch import inspect_file, load_file
from store.ingest.images import decode_image
from store.ingest.inputs import Inputs, load_inputs
from store.ingest.limits import Limits
from store.ingest.results import ImageData, Inspection, TextData
from store.ingest.text import TextEncoder

__all__ = [
    "ImageData", "Inputs", "Inspection", "Limits", "TextData", "TextEncoder", "decode_image", "inspect_file",
    "load_file", "load_inputs",
]
