"""Druid SQL's JSON functions, as DuckDB JSON expressions."""

from __future__ import annotations

from sqlglot import exp

from sluice.broker.calls import DruidFunction


def rewrite_json(node: exp.Expr) -> exp.Expr:
    """A typed JSON function with Druid's meaning where DuckDB's differs; else `node`."""
    return node


JSON_FUNCTIONS: dict[str, DruidFunction] = {}
