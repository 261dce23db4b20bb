"""The base of every spec model: Druid's camelCase names, and unknown fields rejected, never ignored."""

from pydantic import AfterValidator, BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)

    def to_json(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)


def power_of_two(low: int, high: int) -> AfterValidator:
    """A size Druid takes only as a power of 2 within [low, high] (sketch sizes, front-coding buckets)."""

    def check(value: int) -> int:
        if not low <= value <= high or value & (value - 1):
            raise ValueError(f"must be a power of 2 from {low} to {high}, got {value}")
        return value

    return AfterValidator(check)
