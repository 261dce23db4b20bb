"""Druid SQL's array and multi-value string functions, as DuckDB list expressions."""

from __future__ import annotations

from sqlglot import exp

from sluice.broker.calls import DruidFunction


def rewrite_array(node: exp.Expr) -> exp.Expr:
    """A typed array function with Druid's meaning where DuckDB's differs; else `node`."""
    return node


ARRAY_FUNCTIONS: dict[str, DruidFunction] = {}
