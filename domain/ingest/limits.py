"""What an upload may be: sizes, counts and shapes past which a dataset is refused."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Bounds on an uploaded dataset; every refusal names the bound it hit."""

    max_upload_bytes: int = 2 * 1024**3
    max_uncompressed_bytes: int = 8 * 1024**3  # total of an archive's members
    max_members: int = 2_000_000  # archive entries
    max_compression_ratio: float = 200.0  # per member and overall, uncompressed / compressed
    min_samples_per_class: int = 5
    max_classes: int = 1000
    max_image_side: int = 4096
    max_text_chars: int = 100_000  # per sample
    resize: tuple[int, int] | None = None  # declared (height, width): replaces the automatic resize target
