"""A delivered model's explainability report in the database: its report.json (`reports.content`), its PNG images
and its self-contained page `report.html` (both in `report_images`, the page as text/html).

A report is saved in the caller's transaction (the worker's: the one that saves the model), so it is there whole
or not at all.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.models import Report, ReportImage

REPORT_JSON = "report.json"
REPORT_HTML = "report.html"
"""The page's name among the report's files (and in a package's report/ folder)."""
PNG = "image/png"
HTML = "text/html"
NAME_LENGTH = 200
"""Most characters of an image's name (the length of `report_images.name`)."""


def save_report(session: Session, job_id: uuid.UUID, model_id: uuid.UUID, content: Mapping[str, Any],
                images: Mapping[str, bytes], html: str) -> Report:
    """Add the report of `model_id` (a model of `job_id`): its JSON, its PNG images by file name and its page.
    ValueError, before anything is added, for what the database would refuse: JSON that is not strict (NaN,
    infinities, values JSON has no type for), an image name that is taken or too long."""
    try:
        json.dumps(content, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the report is not strict JSON ({exc})") from exc
    if REPORT_HTML in images or REPORT_JSON in images:
        raise ValueError(f"a report image may not be named {REPORT_HTML!r} or {REPORT_JSON!r}")
    if any(len(name) > NAME_LENGTH for name in images):
        raise ValueError(f"a report image's name may have at most {NAME_LENGTH} characters")
    files = [ReportImage(name=name, media_type=PNG, data=bytes(data)) for name, data in images.items()]
    files.append(ReportImage(name=REPORT_HTML, media_type=HTML, data=html.encode("utf-8")))
    report = Report(job_id=job_id, model_id=model_id, content=dict(content), images=files)
    session.add(report)
    return report


def find_report(session: Session, model_id: uuid.UUID) -> Report | None:
    """The explainability report of `model_id`, or None when the model has none."""
    return session.scalars(select(Report).where(Report.model_id == model_id).order_by(Report.created_at.desc())).first()


def image_names(session: Session, report: Report) -> list[str]:
    """The names of the report's PNG images, sorted (the page is not one of them)."""
    return list(session.scalars(select(ReportImage.name).where(ReportImage.report_id == report.id,
                                                               ReportImage.media_type == PNG)
                                .order_by(ReportImage.name)))


def report_file(session: Session, report: Report, name: str) -> ReportImage | None:
    """The report's image (or, named REPORT_HTML, its page) called `name`; None when it has none of that name."""
    return session.scalars(select(ReportImage).where(ReportImage.report_id == report.id,
                                                     ReportImage.name == name)).first()


def report_files(session: Session, model_id: uuid.UUID) -> dict[str, bytes]:
    """The report of `model_id` as a package's report/ files (report.json, report.html, the images); empty when the
    model has no report."""
    report = find_report(session, model_id)
    if report is None:
        return {}
    files = {REPORT_JSON: json.dumps(report.content, indent=2, ensure_ascii=False).encode("utf-8")}
    files.update({image.name: bytes(image.data) for image in report.images})
    return files
