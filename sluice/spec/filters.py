"""Druid dimension filters (transformSpec `filter`) compiled to Spark SQL predicates.

Druid compares filter values as strings unless a bound asks for numeric ordering, so columns are
cast to STRING before comparison; that keeps `{"type":"selector","value":"5"}` matching a long 5.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, model_validator

from sluice.spec.expressions import quote_identifier, string_literal
from sluice.spec.model import SpecModel


def _as_string(dimension: str) -> str:
    return f"CAST({quote_identifier(dimension)} AS STRING)"


def _in(dimension: str, values: list[str | None]) -> str:
    present = [v for v in values if v is not None]
    terms = [f"{_as_string(dimension)} IN ({', '.join(string_literal(str(v)) for v in present)})"] if present else []
    if len(present) < len(values):
        terms.append(f"{quote_identifier(dimension)} IS NULL")
    return "(" + " OR ".join(terms) + ")" if terms else "FALSE"


class SelectorFilter(SpecModel):
    type: Literal["selector"]
    dimension: str
    value: str | int | float | None = None

    def columns(self) -> set[str]:
        return {self.dimension}

    def to_spark_sql(self) -> str:
        return _in(self.dimension, [None if self.value is None else str(self.value)])


class InFilter(SpecModel):
    type: Literal["in"]
    dimension: str
    values: list[str | int | float | None]

    def columns(self) -> set[str]:
        return {self.dimension}

    def to_spark_sql(self) -> str:
        return _in(self.dimension, [None if v is None else str(v) for v in self.values])


class BoundFilter(SpecModel):
    type: Literal["bound"]
    dimension: str
    lower: str | int | float | None = None
    upper: str | int | float | None = None
    lower_strict: bool = False
    upper_strict: bool = False
    ordering: Literal["lexicographic", "numeric"] = "lexicographic"

    @model_validator(mode="after")
    def _has_a_bound(self) -> "BoundFilter":
        if self.lower is None and self.upper is None:
            raise ValueError("a bound filter needs lower, upper or both")
        if self.ordering == "numeric":
            for bound in (self.lower, self.upper):
                if bound is not None:
                    float(bound)  # a non-numeric bound with numeric ordering is a spec error
        return self

    def columns(self) -> set[str]:
        return {self.dimension}

    def to_spark_sql(self) -> str:
        numeric = self.ordering == "numeric"
        column = f"CAST({quote_identifier(self.dimension)} AS DOUBLE)" if numeric else _as_string(self.dimension)

        def literal(value: str | int | float) -> str:
            return repr(float(value)) if numeric else string_literal(str(value))

        terms = []
        if self.lower is not None:
            terms.append(f"{column} {'>' if self.lower_strict else '>='} {literal(self.lower)}")
        if self.upper is not None:
            terms.append(f"{column} {'<' if self.upper_strict else '<='} {literal(self.upper)}")
        return "(" + " AND ".join(terms) + ")"


class _Junction(SpecModel):
    """and / or: the filter's type is also its SQL operator."""

    fields: list["DimFilter"] = Field(min_length=1)

    def columns(self) -> set[str]:
        return set().union(*(f.columns() for f in self.fields))

    def to_spark_sql(self) -> str:
        return "(" + f" {self.type.upper()} ".join(f.to_spark_sql() for f in self.fields) + ")"


class AndFilter(_Junction):
    type: Literal["and"]


class OrFilter(_Junction):
    type: Literal["or"]


class NotFilter(SpecModel):
    type: Literal["not"]
    field: "DimFilter"

    def columns(self) -> set[str]:
        return self.field.columns()

    def to_spark_sql(self) -> str:
        # three-valued, as in Druid's SQL-compatible mode: NOT of an unknown (null) comparison drops the row
        return f"(NOT {self.field.to_spark_sql()})"


DimFilter = Annotated[
    Union[SelectorFilter, InFilter, BoundFilter, AndFilter, OrFilter, NotFilter], Field(discriminator="type")
]
for _model in (AndFilter, OrFilter, NotFilter):
    _model.model_rebuild()
