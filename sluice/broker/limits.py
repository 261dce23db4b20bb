"""What one query may take and return, by default. Druid streams results and bounds the rows a broker holds for
subqueries (druid.server.http.maxSubqueryRows) and the bytes it gathers (maxScatterGatherBytes); Sluice holds a
result in memory before it sends it, so it bounds the result itself, refusing a larger one with "Resource limit
exceeded"."""

DEFAULT_MAX_RESULT_ROWS = 100_000
#: counted over values of variable size (strings, arrays…): fixed-size values are small
DEFAULT_MAX_RESULT_BYTES = 256 * 1024 * 1024
#: Druid's druid.server.http.defaultQueryTimeout
DEFAULT_TIMEOUT_MS = 300_000
