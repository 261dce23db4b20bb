"""Emitter settings (Druid's `druid.emitter.*`) and the factory that builds the emitter they describe."""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from sluice.emitter.core import ComposingEmitter, Emitter, LoggingEmitter, NoopEmitter
from sluice.emitter.http_post import HttpPostEmitter
from sluice.emitter.prometheus import DEFAULT_METRICS, PrometheusEmitter, load_metric_map

SingleEmitterType = Literal["noop", "logging", "http", "prometheus"]

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
