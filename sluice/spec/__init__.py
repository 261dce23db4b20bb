"""Ingestion specs: Druid's supervisor, batch and stream job specs, validated into typed, immutable models.

Import the module you need (`sluice.spec.supervisor`, `sluice.spec.granularity`…): this package imports none of
them, so that reading a granularity or a system field's name does not load the whole spec model (and sqlglot) into
every Spark Python worker.
"""
