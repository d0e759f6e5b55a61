"""/v1/artifacts/{digest}: any stored blob by its content address."""
from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from sqlalchemy.orm import Session

from services.store import repo

from ..auth import READ
from ..deps import get_session
from ..responses import AUTH, COMMON, content
from ..schemas import ErrorOut

router = APIRouter(tags=["topologies"], dependencies=[Depends(READ)], responses={**COMMON, **AUTH})


@router.get("/v1/artifacts/{digest}", responses={
    **AUTH, 404: {"model": ErrorOut}, 304: {"description": "unchanged (If-None-Match)"},
    200: content("the blob, in the media type it was stored with", "application/json", "application/x-npz",
                 "application/xml", "application/graphml+xml")})
def get_artifact(digest: str, request: Request, s: Session = Depends(get_session)):
    """Any stored blob by its content address."""
    found = repo.get_blob(s, digest)
    if found is None:
        raise HTTPException(404, f"artifact {digest} not found")
    data, art = found
    etag = f'"{digest}"'
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers={"ETag": etag})
    return Response(data, media_type=art.media_type.removesuffix("+zlib"), headers={"ETag": etag})
