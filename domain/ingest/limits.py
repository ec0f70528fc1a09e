"""What an upload may be: sizes, counts and shapes past which a dataset is refused."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Bounds on an uploaded dataset; every refusal names the bound it hit.

    The per-image bounds keep checking an upload in bounded memory (docs/api.md, "Bounded memory"): an image of a
    zip is decoded whole, so `max_image_pixels` bounds what one decode holds (about 4 bytes a pixel); an npz is
    read a few MiB at a time whatever its rows' size.
    """

    max_upload_bytes: int = 2 * 1024**3
    max_uncompressed_bytes: int = 8 * 1024**3  # total of an archive's members
    max_members: int = 2_000_000  # archive entries
    max_compression_ratio: float = 200.0  # per member and overall, uncompressed / compressed
    min_samples_per_class: int = 5
    max_classes: int = 1000
    max_image_side: int = 4096
    max_image_pixels: int = 4096 * 3072  # height x width of one image (12.6 million: a 12-megapixel photo)
    max_image_file_bytes: int = 32 * 1024**2  # one image file of a zip, whatever it holds after the image's end
    max_resize_side: int = 512  # a declared resize's height and width
    max_text_chars: int = 100_000  # per sample
    resize: tuple[int, int] | None = None  # declared (height, width): replaces the automatic resize target
