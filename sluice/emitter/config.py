"""Emitter settings (Druid's `druid.emitter.*`) and the factory that builds the emitter they describe."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from sluice.config import ConfigError, PropertyReader
from sluice.emitter.core import ComposingEmitter, Emitter, LoggingEmitter, NoopEmitter
from sluice.emitter.http_post import HttpPostEmitter
from sluice.emitter.prometheus import DEFAULT_METRICS, PrometheusEmitter, load_metric_map

SingleEmitterType = Literal["noop", "logging", "http", "prometheus"]

log = logging.getLogger(__name__)

_LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


class EmitterConfig(BaseModel):
    """Druid's emitter properties in one model. `type` is `druid.emitter`, `emitters` is
    `druid.emitter.composing.emitters`, and the other fields are each emitter's own settings
    (`druid.emitter.http.*`, `druid.emitter.prometheus.*`, `druid.emitter.logging.logLevel`): their names
    never clash, so one flat model serves a composing emitter's children too."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)

    type: SingleEmitterType | Literal["composing"] = "noop"
    emitters: tuple[SingleEmitterType, ...] = ()
    # http
    recipient_base_url: str | None = None
    flush_millis: int = Field(60_000, ge=1)
    flush_count: int = Field(500, ge=1)
    #: events waiting to be sent; Druid's default holds 50 batches of 500
    max_queue_size: int = Field(25_000, ge=1)
    # logging
    log_level: Literal["debug", "info", "warn", "error"] = "info"
    # prometheus
    namespace: str = Field("druid", pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    dimension_map_path: str | None = None
    add_host_as_label: bool = False
    add_service_as_label: bool = False

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> EmitterConfig:
        """`druid.emitter`, `druid.emitter.composing.emitters` and `druid.emitter.<type>.<setting>`; ConfigError naming
        the key that is wrong."""
        keys = {"type": "druid.emitter", "emitters": "druid.emitter.composing.emitters",
                "recipientBaseUrl": "druid.emitter.http.recipientBaseUrl"}
        for name in cls.model_fields:
            alias = to_camel(name)
            for kind in ("http", "logging", "prometheus"):
                if f"druid.emitter.{kind}.{alias}" in properties:
                    keys[alias] = f"druid.emitter.{kind}.{alias}"
        for key in sorted(k for k in properties if k.startswith("druid.emitter.") and k not in keys.values()):
            log.warning("configuration key %s is not one Sluice knows; it is ignored", key)
        values: dict[str, object] = {alias: properties[key].strip() for alias, key in keys.items() if key in properties}
        if "emitters" in values:
            values["emitters"] = PropertyReader(properties).names(keys["emitters"], [])
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            problem = error.errors()[0]
            field_name = str(problem["loc"][0]) if problem["loc"] else ""
            message = problem["msg"].removeprefix("Value error, ")
            named = next((alias for alias in keys if message.startswith(alias + ": ")), None)
            if named is not None:
                raise ConfigError(f"{keys[named]}: {message.removeprefix(named + ': ')}") from None
            raise ConfigError(f"{keys.get(field_name, 'druid.emitter')}: {message}") from None

    @model_validator(mode="after")
    def _complete(self) -> EmitterConfig:
        if self.type == "composing" and not self.emitters:
            raise ValueError("emitters: a composing emitter needs a list of emitters, "
                             "e.g. [\"prometheus\", \"http\"]")
        if self.type != "composing" and self.emitters:
            raise ValueError(f"emitters: only the composing emitter takes a list of emitters, not [{self.type}]")
        if "http" in (self.type, *self.emitters) and not self.recipient_base_url:
            raise ValueError("recipientBaseUrl: the http emitter needs the URL to POST events to")
        return self


def build_emitter(config: EmitterConfig) -> Emitter:
    """The emitter `config` describes, not yet started (a Lifecycle starts and closes it)."""
    if config.type == "composing":
        return ComposingEmitter([_build(config, kind) for kind in config.emitters])
    return _build(config, config.type)


def _build(config: EmitterConfig, kind: SingleEmitterType) -> Emitter:
    if kind == "logging":
        return LoggingEmitter(level=_LOG_LEVELS[config.log_level])
    if kind == "http":
        assert config.recipient_base_url is not None  # checked by the model
        return HttpPostEmitter(config.recipient_base_url, flush_millis=config.flush_millis,
                               flush_count=config.flush_count, max_queue_size=config.max_queue_size)
    if kind == "prometheus":
        metric_map = load_metric_map(config.dimension_map_path) if config.dimension_map_path else DEFAULT_METRICS
        return PrometheusEmitter(config.namespace, metric_map, add_host_as_label=config.add_host_as_label,
                                 add_service_as_label=config.add_service_as_label)
    return NoopEmitter()
