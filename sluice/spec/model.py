"""The base of every spec model: Druid's camelCase names, and unknown fields rejected, never ignored."""

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)

    def to_json(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)
