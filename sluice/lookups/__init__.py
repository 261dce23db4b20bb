"""Druid's query-time lookups: their specs, the coordinator's document of them, and their loading on brokers."""
