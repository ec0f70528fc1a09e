"""`/models/{id}/report`: a trained model's explainability report, its images and its self-contained page."""

from __future__ import annotations

from fastapi import Request, Response

from api.deps import SessionDep
from api.openapi import problems
from api.routes.models import NO_MODEL, OwnedModel, model_router
from api.schemas.explanations import ReportOut
from domain.errors import NotFound
from store.models import Report, TrainedModel
from store.reports import HTML, PNG, REPORT_HTML, find_report, image_names, report_file

router = model_router()

PAGE_POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; sandbox"
"""What the page may load and run: its inlined images and styles, nothing else (it shows texts from the data)."""
NO_REPORT = f"{NO_MODEL} Or the model has no report (`reason`: 'report-absent')."


def _report(session: SessionDep, model: TrainedModel) -> Report:
    report = find_report(session, model.id)
    if report is None:
        raise NotFound(f"model {model.id} has no explainability report: its job had no time left for one",
                       reason="report-absent")
    return report


@router.get("/{model_id}/report", responses=problems({NotFound: NO_REPORT}))
def read_report(model: OwnedModel, session: SessionDep, request: Request) -> ReportOut:
    """The model's explainability report (its report.json), with the URL of each image and of the HTML page."""
    report = _report(session, model)
    images = {name: request.app.url_path_for("report_image", model_id=str(model.id), name=name)
              for name in image_names(session, report)}
    return ReportOut(model_id=model.id, created_at=report.created_at, report=report.content, images=images,
                     html=request.app.url_path_for("report_page", model_id=str(model.id)))


@router.get("/{model_id}/report/images/{name}", response_class=Response, responses={
    200: {"content": {PNG: {}}, "description": "The PNG image."},
    **problems({NotFound: f"{NO_REPORT} Or the report has no image of this name (`reason`: 'image-absent')."}),
})
def report_image(model: OwnedModel, name: str, session: SessionDep) -> Response:
    """One image of the model's report, by the file name the report lists."""
    found = report_file(session, _report(session, model), name)
    if found is None or found.media_type != PNG:
        raise NotFound(f"the report of model {model.id} has no image {name!r}", reason="image-absent")
    return Response(bytes(found.data), media_type=PNG)


@router.get("/{model_id}/report.html", response_class=Response, responses={
    200: {"content": {HTML: {}}, "description": "The self-contained page (images inlined); it opens offline."},
    **problems({NotFound: NO_REPORT}),
})
def report_page(model: OwnedModel, session: SessionDep) -> Response:
    """The model's report as one self-contained HTML page."""
    found = report_file(session, _report(session, model), REPORT_HTML)
    if found is None:  # saved with every report; a report without one is as good as none
        raise NotFound(f"model {model.id} has no explainability report page", reason="report-absent")
    return Response(bytes(found.data), media_type=HTML, headers={"Content-Security-Policy": PAGE_POLICY})
