"""Request bodies as Druid reads them: JSON, with a 400 that says what is wrong otherwise."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

TOO_DEEP = ("The request is too deeply nested to read (JSON, SQL subqueries or parentheses beyond what Sluice's "
            "parsers recurse into)")


async def read_json(request: Request) -> Any:
    body = await request.body()
    try:
        return json.loads(body)
    except json.JSONDecodeError as error:
        raise HTTPException(status_code=400, detail=f"request body is not valid JSON: {error}") from None


def refuse_deep_nesting(app: FastAPI) -> None:
    """A JSON document, query or expression nested deeper than Python's recursion limit is the request's fault: 400,
    wherever the parser that gave up runs."""

    @app.exception_handler(RecursionError)
    async def too_deep(_request: Request, _error: RecursionError) -> JSONResponse:
        return JSONResponse({"error": TOO_DEEP}, status_code=400)
