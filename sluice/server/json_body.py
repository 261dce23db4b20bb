"""Request bodies as Druid reads them: JSON, with a 400 that says what is wrong otherwise."""

from __future__ import annotations

import json
from typing import Any

from fastapi import HTTPException, Request


async def read_json(request: Request) -> Any:
    body = await request.body()
    try:
        return json.loads(body)
    except json.JSONDecodeError as error:
        raise HTTPException(status_code=400, detail=f"request body is not valid JSON: {error}") from None
