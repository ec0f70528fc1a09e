"""Explainability: attribution methods for image and text models, checks they can fail, training-data influence,
and the report every delivered model ships with.

Methods register by name in :data:`METHODS` (`gradcam`, `integrated-gradients`, `smoothgrad`, `occlusion`); each
explains images per pixel and texts per word (:class:`Explainer`).
"""

from synthesis.explain import gradcam, integrated, occlusion, smoothgrad  # noqa: F401  (they register)
from synthesis.explain.base import METHODS, Explainer, method
from synthesis.explain.report import Report, ReportData, build_report
from synthesis.explain.subject import Subject, TextCodec

__all__ = ["METHODS", "Explainer", "Report", "ReportData", "Subject", "TextCodec", "build_report", "method"]
