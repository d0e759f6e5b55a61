"""/v1/artifacts/{digest}: any stored blob by its content address."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from sqlalchemy.orm import Session

from ..auth import READ
from ..blobs import blob_response
from ..deps import get_session
from ..responses import AUTH, COMMON, download
from ..schemas import ErrorOut

router = APIRouter(tags=["topologies"], dependencies=[Depends(READ)], responses={**COMMON, **AUTH})


@router.get("/v1/artifacts/{digest}", responses={
    **AUTH, 404: {"model": ErrorOut}, 304: {"description": "unchanged (If-None-Match)"},
    200: download("the blob, in the media type it was stored with (npz as application/octet-stream)",
                  "application/json", "application/xml", "application/graphml+xml")})
def get_artifact(digest: str, request: Request, s: Session = Depends(get_session)):
    """Any stored blob by its content address."""
    return blob_response(request, s, digest)
