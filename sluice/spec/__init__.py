"""Ingestion specs: Druid's Kafka supervisor spec, validated into typed, immutable models."""

from sluice.spec.data_schema import AggregatorSpec, DataSchema, DimensionSpec, TimestampSpec
from sluice.spec.errors import SpecError
from sluice.spec.granularity import Granularity, parse_granularity
from sluice.spec.supervisor import IngestionSpec, KafkaIOConfig, KafkaSupervisorSpec, KafkaTuningConfig, parse_supervisor_spec

__all__ = [
    "AggregatorSpec", "DataSchema", "DimensionSpec", "Granularity", "IngestionSpec", "KafkaIOConfig",
    "KafkaSupervisorSpec", "KafkaTuningConfig", "SpecError", "TimestampSpec", "parse_granularity",
    "parse_supervisor_spec",
]
