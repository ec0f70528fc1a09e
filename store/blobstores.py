"""Which blob store the settings name: the filesystem one (`store.blobs`) or the S3 one (`store.s3blobs`, imported
only when named, so boto3 loads only where it is used). Both build on `store.blobs`; neither imports this module."""

from __future__ import annotations

from urllib.parse import urlsplit
from urllib.request import url2pathname

from infra.settings import Settings, blob_url_kind
from store.blobs import BlobStore, FileBlobStore


def make_blob_store(settings: Settings) -> BlobStore:
    """The blob store the settings name: `blob_url` (s3://bucket/prefix, with `s3_endpoint_url` for a compatible
    server and a local cache of `blob_cache_bytes` under `blob_dir`; file:///path or a path), else `blob_dir`."""
    url = settings.blob_url
    if blob_url_kind(url) == "s3":
        from store.s3blobs import S3BlobStore

        return S3BlobStore.from_url(url, scratch=settings.blob_dir, cache_bytes=settings.blob_cache_bytes,
                                    endpoint_url=settings.s3_endpoint_url or None)
    if url.startswith("file:"):
        return FileBlobStore(url2pathname(urlsplit(url).path))
    return FileBlobStore(url or settings.blob_dir)
