"""Druid's SQL-based ingestion (MSQ's INSERT and REPLACE) as `index_parallel` specs run by a `query_controller` task.

`parse` peels Druid's ingestion clauses off the statement, `translate` turns the rest into a batch payload, `task`
runs it with the batch machinery.
"""
